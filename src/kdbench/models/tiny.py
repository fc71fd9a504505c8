"""The `tiny` teacher: a random BERT from a config and a character-level WordPiece vocabulary, so
tests and smoke runs need no download at all."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from filelock import FileLock
from transformers import AutoTokenizer, BertConfig

from kdbench.planning.specs import ShapeSpec
from kdbench.runtime import storage

_TINY_VOCAB = (
    ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    + list("abcdefghijklmnopqrstuvwxyz0123456789.,;:!?'\"-()&/$%")
    + ["##" + c for c in "abcdefghijklmnopqrstuvwxyz0123456789"]
)


def tiny_tokenizer(cache_dir: Path):
    """A BERT WordPiece tokenizer over `_TINY_VOCAB`, saved as a tokenizer folder and loaded like
    any model's."""
    folder = cache_dir / "tiny-tokenizer"
    cache_dir.mkdir(parents=True, exist_ok=True)
    with FileLock(str(folder) + ".lock"):
        if not storage.intact(folder, "the tiny tokenizer's cache entry"):
            tmp = cache_dir / f".tiny-tokenizer.{os.getpid()}.tmp"
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir()
            (tmp / "vocab.txt").write_text("\n".join(_TINY_VOCAB) + "\n")
            (tmp / "tokenizer_config.json").write_text(
                '{"tokenizer_class": "BertTokenizer", "do_lower_case": true}'
            )
            storage.publish(tmp, folder)
    return AutoTokenizer.from_pretrained(str(folder))


def tiny_config(shape: ShapeSpec, num_labels: int) -> BertConfig:
    return BertConfig(
        vocab_size=len(_TINY_VOCAB),
        hidden_size=shape.hidden_size,
        num_hidden_layers=shape.num_layers,
        num_attention_heads=shape.num_heads,
        intermediate_size=shape.ffn_size,
        max_position_embeddings=shape.max_positions,
        num_labels=num_labels,
    )
