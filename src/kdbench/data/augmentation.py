"""TinyBERT's data augmentation (Jiao et al., 2020, Appendix A, Algorithm 1): word-level
replacement.

Every word of a training sentence is a candidate for replacement unless it is a stop word or not
alphabetic. Its candidates come from the original sentence: a word that is one word piece gets the
`top_k` most likely predictions of a masked language model at its position, masked (many such masked
sentences per forward pass; as released, the original sentence follows the masked one as segment B
unless `mlm_with_original` is false); a word of several pieces gets its `top_k` nearest words by
cosine similarity in GloVe vectors (both in `kdbench.data.word_candidates`). Each of the
`n_per_example` copies replaces every word with candidates, with probability `p_replace`, by one of
them drawn at random; copies equal to the original or to an earlier copy are dropped. A pair's
sentences are augmented each on its own (`fields=separate`, as released: the first sentence's
copies, then the second's, the other sentence left as it is), together (`all`) or only the first
(`first`). The originals come first, labels are copied, and `origin` names each example's original
(its `idx`), so subsetting by original and augmenting commute.

A copy's randomness is a function of (seed, origin) only: the same original gets the same copies in
any subset.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import shutil
from dataclasses import asdict, replace
from pathlib import Path

import datasets
import torch
from filelock import FileLock
from transformers import AutoModelForMaskedLM, AutoTokenizer, BertConfig

from kdbench.data.columns import column_list
from kdbench.data.word_candidates import Candidates, MaskedLMCandidates, VectorNeighbours, Word
from kdbench.models import hub
from kdbench.models.anatomy import encoder_layers
from kdbench.planning.specs import AugmentSpec, TaskSpec
from kdbench.runtime import storage
from kdbench.training.signals import phase, stop_between

log = logging.getLogger("kdbench")

AUGMENT_CACHE_VERSION = 1


def match_case(candidate: str, word: str) -> str:
    """The candidate written like the word it replaces: Capitalised, UPPER or as predicted."""
    if word.isupper() and len(word) > 1:
        return candidate.upper()
    if word[0].isupper():
        return candidate[:1].upper() + candidate[1:]
    return candidate


# ------------------------------------------------------------------------------------------------
# the copies


def replaced(text: str, words: list[Word], rng: random.Random, p_replace: float) -> str:
    """One copy of `text`: each word with candidates replaced, with probability p_replace, by a
    random one."""
    pieces, cursor = [], 0
    for word in words:
        if rng.random() < p_replace:
            pieces += [
                text[cursor : word.start],
                match_case(rng.choice(word.candidates), text[word.start : word.end]),
            ]
            cursor = word.end
    return "".join(pieces) + text[cursor:]


def copies(
    fields: list[str], words: list[list[Word]], origin: int | str, spec: AugmentSpec
) -> list[list[str]]:
    """The distinct augmented copies of one example's `fields`, none equal to the original;
    `origin` seeds them."""
    rng = random.Random(f"{spec.seed}/{origin}")
    seen, out = {tuple(fields)}, []
    for _ in range(spec.n_per_example):
        copy = [
            replaced(text, found, rng, spec.p_replace)
            for text, found in zip(fields, words, strict=True)
        ]
        if tuple(copy) not in seen:
            seen.add(tuple(copy))
            out.append(copy)
    return out


def field_groups(text_fields: list[str], fields: str) -> list[list[str]]:
    """The text fields each copy changes together: each on its own (separate), all, or the first."""
    if fields == "separate" and len(text_fields) > 1:
        return [[field] for field in text_fields]
    return [list(text_fields if fields == "all" else text_fields[:1])]


def augment(
    train: datasets.Dataset, task: TaskSpec, spec: AugmentSpec, candidates: Candidates
) -> datasets.Dataset:
    """The originals, then their copies: the task's text fields, `label`, `idx` and `origin`."""
    groups = field_groups(list(task.text_fields), spec.fields)
    spec = replace(spec, n_per_example=spec.copies_for(task.name))
    originals = {name: column_list(train, name) for name in (*task.text_fields, "label", "idx")}
    found = {field: candidates.for_texts(originals[field]) for group in groups for field in group}
    columns = {name: list(values) for name, values in originals.items()} | {
        "origin": list(originals["idx"])
    }
    for row, origin in enumerate(originals["idx"]):
        for group in groups:
            key = origin if len(groups) == 1 else f"{origin}/{group[0]}"
            fields = [originals[field][row] for field in group]
            for copy in copies(fields, [found[field][row] for field in group], key, spec):
                for field in task.text_fields:
                    kept = originals[field][row]
                    columns[field].append(copy[group.index(field)] if field in group else kept)
                columns["label"].append(originals["label"][row])
                columns["idx"].append(origin)
                columns["origin"].append(origin)
    features = train.features.copy()
    features["origin"] = datasets.Value("int32")
    return datasets.Dataset.from_dict(columns, features=features)


# ------------------------------------------------------------------------------------------------
# the cache


def masked_lm(spec: AugmentSpec):
    """The MLM and its tokenizer: `mlm_model` from a local copy or the Hub, or random of
    `mlm_shape`."""
    tokenizer = hub.load(AutoTokenizer, spec.mlm_model)
    if spec.mlm_shape is None:
        return hub.load(AutoModelForMaskedLM, spec.mlm_model), tokenizer
    torch.manual_seed(spec.seed)
    shape = spec.mlm_shape
    config = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=shape.hidden_size,
        num_hidden_layers=shape.num_layers,
        num_attention_heads=shape.num_heads,
        intermediate_size=shape.ffn_size,
        max_position_embeddings=shape.max_positions,
    )
    return AutoModelForMaskedLM.from_config(config), tokenizer


def cache_key(train: datasets.Dataset, task: TaskSpec, spec: AugmentSpec, source: str) -> dict:
    vectors = spec.word_vectors
    stamp = (
        None
        if vectors is None
        else [str(vectors.resolve()), vectors.stat().st_size, vectors.stat().st_mtime_ns]
    )
    originals = hashlib.sha256(json.dumps(sorted(train["idx"])).encode()).hexdigest()
    settings = asdict(spec) | {"mlm_model": hub.model_identity(spec.mlm_model)}
    if vectors is None:  # no GloVe file: how much of one would be read changes nothing
        del settings["word_vectors_limit"]
    key = {
        "version": AUGMENT_CACHE_VERSION,
        "task": task.name,
        "source": source,
        "originals": originals,
        "augment": json.loads(json.dumps(settings, default=str)),
        "word_vectors": stamp,
    }
    # a user's data: its file's hash (its rows and label names), not the row numbers alone
    return key | ({"content": task.content_hash} if task.content_hash else {})


def augmented_train_set(
    train: datasets.Dataset,
    task: TaskSpec,
    spec: AugmentSpec,
    cache_dir: Path,
    source: str,
    device: torch.device,
    progress: bool = True,
) -> tuple[datasets.Dataset, Path]:
    """The augmented training set and its cache entry, built once (under a lock, written complete or
    not at all)."""
    key = cache_key(train, task, spec, source)
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    path = cache_dir / "augmented" / f"{task.name}-{digest}"
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock"):
        if not storage.intact(path, "the augmented training set's cache entry"):
            build(train, task, spec, path, key, device, progress)
    return datasets.load_from_disk(str(path)), path


def build(
    train, task: TaskSpec, spec: AugmentSpec, path: Path, key: dict, device, progress: bool
) -> None:
    model, tokenizer = masked_lm(spec)
    vectors = (
        VectorNeighbours(spec.word_vectors, spec.top_k, spec.word_vectors_limit)
        if spec.word_vectors is not None
        else None
    )
    if vectors is None:
        log.warning(
            "augment: no GloVe file (augment.word_vectors=null): words of several word "
            "pieces stay as they are; give augment.word_vectors a GloVe text file to "
            "replace them too"
        )
    mlm = MaskedLMCandidates(
        model.to(device), tokenizer, spec.top_k, spec.batch_size, progress, spec.mlm_with_original
    )
    log.info(
        "augmenting %d %s examples (%d copies each)",
        len(train),
        task.name,
        spec.copies_for(task.name),
    )
    with phase("augmentation"), stop_between(encoder_layers(model)):
        augmented = augment(train, task, spec, Candidates(mlm, vectors))
    tmp = path.with_name(path.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    with storage.space_for(path, partial=tmp):
        augmented.save_to_disk(str(tmp))
        (tmp / "kdbench_augment.json").write_text(
            json.dumps({"key": key, "examples": len(augmented), "originals": len(train)}, indent=1)
        )
        storage.publish(tmp, path)
