"""One corpus cache entry written: documents tokenised, held out by a hash of their tokens, each
split's token stream packed onto disk (:mod:`kdbench.data.packed`), and the entry's metadata.

* Documents are tokenised with `add_special_tokens=False`, no truncation and
  `split_special_tokens=True`, so text that happens to spell a special token ("[SEP]", "<s>") is
  tokenised as ordinary text.
* Documents that tokenise to zero tokens (e.g. only characters the tokenizer deletes) have nothing
  to store; they are counted in the metadata (`docs_without_tokens`), not stored.
* Held-out split, by document: a document is held out when the 64-bit BLAKE2b hash of its token
  ids, as a fraction of 2**64, is below `heldout_fraction` (default 0.01). The decision depends only
  on what the model reads of the document, so it is stable when files are added or reordered, and
  documents that tokenise alike (duplicates, or copies differing only in what the tokenizer drops,
  such as case for an uncased one) always land in the same split (no train/held-out leakage through
  them).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kdbench.data.packed import CORPUS_FORMAT_VERSION, pack_tokens
from kdbench.data.readers import read_documents
from kdbench.errors import ConfigError, DataError
from kdbench.training.signals import check_stop

log = logging.getLogger(__name__)

_TOKENISE_BATCH = 256  # documents per fast-tokenizer call


def is_heldout(tokens: Sequence[int], fraction: float) -> bool:
    """Whether a document of token ids `tokens` is held out under `heldout_fraction=fraction` (a
    hash of its ids)."""
    ids = np.asarray(tokens, dtype="<u4").tobytes()
    digest = hashlib.blake2b(ids, digest_size=8).digest()
    return int.from_bytes(digest, "big") < fraction * 2.0**64


def _token_dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16) if vocab_size <= 2**16 else np.dtype(np.int32)


def special_ids(tokenizer) -> dict[str, int]:
    ids = {
        "cls": tokenizer.cls_token_id,
        "sep": tokenizer.sep_token_id,
        "pad": tokenizer.pad_token_id,
    }
    missing = [name for name, value in ids.items() if value is None]
    if missing:
        raise ConfigError(
            f"tokenizer {tokenizer.name_or_path or type(tokenizer).__name__} has no "
            f"{'/'.join(missing)} token: packing needs cls, sep and pad tokens (use a BERT-family "
            "tokenizer)"
        )
    return ids


class _SplitWriter:
    """Appends documents' tokens (with a separator between documents) to a raw stream file."""

    def __init__(self, path: Path, dtype: np.dtype, sep_id: int):
        self.path = path
        self.dtype = dtype
        self.sep = np.array([sep_id], dtype=dtype)
        self.file = open(path, "wb")
        self.docs = 0
        self.tokens = 0

    def add(self, ids: Sequence[int]) -> None:
        if self.docs:
            self.file.write(self.sep.tobytes())
        self.file.write(np.asarray(ids, dtype=self.dtype).tobytes())
        self.docs += 1
        self.tokens += len(ids)

    def close(self) -> None:
        self.file.close()


def _write_split(
    raw: Path, npy: Path, dtype: np.dtype, seq_len: int, ids: Mapping[str, int]
) -> tuple[int, int]:
    """Pack a raw stream file into `npy` (memory-mapped writes); returns (sequences,
    final_length)."""
    n_stream = raw.stat().st_size // dtype.itemsize
    width = seq_len - 2
    n_rows = -(-n_stream // width)
    if n_rows == 0:
        np.save(npy, np.empty((0, seq_len), dtype=dtype))
        return 0, seq_len
    stream = np.memmap(raw, dtype=dtype, mode="r", shape=(n_stream,))
    out = np.lib.format.open_memmap(npy, mode="w+", dtype=dtype, shape=(n_rows, seq_len))
    _, final_length = pack_tokens(stream, seq_len, ids["cls"], ids["sep"], ids["pad"], out=out)
    out.flush()
    del out, stream
    return n_rows, final_length


def _tokenise_batches(docs: Iterable[str], tokenizer) -> Iterator[list[int]]:
    """Each document's token ids, tokenised `_TOKENISE_BATCH` documents per tokenizer call; a stop
    signal ends it between calls."""
    docs = iter(docs)
    while batch := list(itertools.islice(docs, _TOKENISE_BATCH)):
        check_stop()
        enc = tokenizer(
            batch,
            add_special_tokens=False,
            truncation=False,
            split_special_tokens=True,
            return_attention_mask=False,
            return_token_type_ids=False,
            verbose=False,
        )
        yield from enc["input_ids"]


@dataclass(frozen=True)
class BuildJob:
    """What one cache entry is built from, and the entry's name (`key`)."""

    files: Sequence[Path]
    origin: Path
    fmt: str
    tokenizer: Any
    seq_len: int
    split: Mapping[str, Any]
    max_docs: int | None
    key: str

    def documents(self) -> Iterator[str]:
        """The documents in reading order, the first `max_docs` of them when set."""
        docs = read_documents(self.files, self.fmt, self.origin)
        return docs if self.max_docs is None else itertools.islice(docs, self.max_docs)


def _write_streams(
    tmp: Path, job: BuildJob, dtype: np.dtype, sep_id: int
) -> tuple[dict[str, _SplitWriter], dict[str, int]]:
    """Tokenise the documents into a raw stream file per split; the writers and document counts."""
    writers = {
        name: _SplitWriter(tmp / f"{name}.stream", dtype, sep_id) for name in ("train", "heldout")
    }
    counts = {"docs": 0, "docs_without_tokens": 0}
    try:
        for tokens in _tokenise_batches(job.documents(), job.tokenizer):
            counts["docs"] += 1
            if counts["docs"] % 100_000 == 0:
                log.info("corpus %s: %d documents tokenised", job.key, counts["docs"])
            if not tokens:
                counts["docs_without_tokens"] += 1
                continue
            writers["heldout" if is_heldout(tokens, job.split["fraction"]) else "train"].add(tokens)
    finally:
        for w in writers.values():
            w.close()
    return writers, counts


def _check_streams(writers: Mapping[str, _SplitWriter], job: BuildJob) -> None:
    """Refuse a corpus with no tokens at all, or with none left for training."""
    if writers["train"].docs + writers["heldout"].docs == 0:
        raise DataError(
            f"no document under {job.origin} produced any token with tokenizer "
            f"{job.tokenizer.name_or_path}: "
            "check the corpus text"
        )
    if writers["train"].docs == 0:
        raise DataError(
            f"every document under {job.origin} went to the held-out split ({dict(job.split)}): "
            "lower heldout_fraction or add text"
        )


def _pack_split(
    writer: _SplitWriter, npy: Path, dtype: np.dtype, seq_len: int, ids: Mapping[str, int]
) -> dict[str, int]:
    """Pack one split's stream file into `npy`, delete the stream, and return the split's
    metadata."""
    sequences, final_length = _write_split(writer.path, npy, dtype, seq_len, ids)
    writer.path.unlink()
    return {
        "docs": writer.docs,
        "tokens": writer.tokens,
        "separators": max(writer.docs - 1, 0),
        "sequences": sequences,
        "final_length": final_length,
        "padding": seq_len - final_length if sequences else 0,
    }


def build_entry_files(tmp: Path, job: BuildJob) -> None:
    """Write the cache entry's files into `tmp`: `train.npy`, `heldout.npy` and `meta.json`."""
    started = time.perf_counter()
    log.info("building corpus %s from %d file(s) under %s", job.key, len(job.files), job.origin)
    ids = special_ids(job.tokenizer)
    vocab_size = len(job.tokenizer)
    dtype = _token_dtype(vocab_size)
    writers, counts = _write_streams(tmp, job, dtype, ids["sep"])
    _check_streams(writers, job)
    splits = {
        name: _pack_split(w, tmp / f"{name}.npy", dtype, job.seq_len, ids)
        for name, w in writers.items()
    }
    if splits["heldout"]["docs"] == 0 and job.split["fraction"]:
        log.warning(
            "corpus %s: the held-out split is empty (%s over %d documents)",
            job.key,
            dict(job.split),
            counts["docs"],
        )
    meta = {
        "version": CORPUS_FORMAT_VERSION,
        "key": job.key,
        "source": str(job.origin.resolve()),
        "files": len(job.files),
        "fmt": job.fmt,
        "tokenizer": str(job.tokenizer.name_or_path),
        "vocab_size": vocab_size,
        "special_ids": ids,
        "seq_len": job.seq_len,
        "dtype": dtype.name,
        "split": dict(job.split),
        "max_docs": job.max_docs,
        "packing": "[CLS] window [SEP]; [SEP] between documents; last sequence padded",
        **counts,
        "tokens": splits["train"]["tokens"] + splits["heldout"]["tokens"],
        "sequences": splits["train"]["sequences"] + splits["heldout"]["sequences"],
        "splits": splits,
        "build_seconds": round(time.perf_counter() - started, 3),
    }
    (tmp / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
