"""Raw-text corpus for task-agnostic (pre-training-stage) distillation, built once per input and
cached.

`build_packed_corpus` reads documents (plain text or WikiExtractor output;
:mod:`kdbench.data.readers`) from a file or a directory, tokenises them, splits them by document
into train / held-out (:mod:`kdbench.data.corpus_build`), packs each split into fixed-length
sequences and caches the result as memory-mapped `.npy` arrays, opened as a `PackedCorpus`
(:mod:`kdbench.data.packed`). MLM masking of the packed sequences lives in `kdbench.data.masking`.
Every decision of those modules is part of the cache key through `CORPUS_FORMAT_VERSION`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from filelock import FileLock

from kdbench.data.corpus_build import BuildJob, build_entry_files, special_ids
from kdbench.data.packed import CORPUS_FORMAT_VERSION, PackedCorpus
from kdbench.data.readers import input_files, reader_for
from kdbench.errors import ConfigError
from kdbench.runtime import storage
from kdbench.training.signals import phase

log = logging.getLogger(__name__)

DEFAULT_HELDOUT_FRACTION = 0.01
_MAX_SANE_MODEL_LENGTH = 1_000_000  # tokenizers without a real limit report ~1e30


def _tokenizer_fingerprint(tokenizer) -> str:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        # truncation / padding are call-time state (every call rewrites them), not part of what
        # tokens come out
        settings = {
            k: v
            for k, v in json.loads(backend.to_str()).items()
            if k not in ("truncation", "padding")
        }
        payload = json.dumps(settings, sort_keys=True)
    else:
        payload = json.dumps(sorted(tokenizer.get_vocab().items()))
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:16]


def _split_spec(heldout_fraction: float | None) -> dict[str, Any]:
    """The held-out rule as it enters the cache key and the metadata."""
    fraction = DEFAULT_HELDOUT_FRACTION if heldout_fraction is None else float(heldout_fraction)
    if not 0.0 <= fraction < 1.0:
        raise ConfigError(f"heldout_fraction={heldout_fraction!r} must be in [0, 1)")
    return {"mode": "hash_fraction", "fraction": fraction}


def corpus_key(
    files: Sequence[Path],
    fmt: str,
    tokenizer,
    seq_len: int,
    split: Mapping[str, Any],
    max_docs: int | None,
) -> str:
    """The entry name: a hash of the files (path, size, mtime), format, tokenizer and settings."""
    stats = []
    for f in files:
        st = f.stat()
        stats.append([str(f.resolve()), st.st_size, st.st_mtime_ns])
    spec = {
        "version": CORPUS_FORMAT_VERSION,
        "files": stats,
        "fmt": fmt,
        "tokenizer": {
            "name_or_path": str(tokenizer.name_or_path),
            "class": type(tokenizer).__name__,
            "vocab_size": len(tokenizer),
            "fingerprint": _tokenizer_fingerprint(tokenizer),
            **special_ids(tokenizer),
        },
        "seq_len": seq_len,
        "split": dict(split),
        "max_docs": max_docs,
    }
    digest = hashlib.sha256(json.dumps(spec, sort_keys=True).encode("utf-8")).hexdigest()[:20]
    return f"{fmt}-L{seq_len}-{digest}"


def _try_load(entry: Path) -> PackedCorpus | None:
    """The entry when it exists and matches its manifest (a damaged one is removed with a
    warning)."""
    if not storage.intact(entry, "the corpus cache entry"):
        return None
    return PackedCorpus.load(entry)


def _check_build_settings(fmt: str, tokenizer, seq_len: int, max_docs: int | None) -> None:
    reader_for(fmt)
    if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 3:
        raise ConfigError(
            f"seq_len={seq_len!r} must be an integer >= 3 ([CLS] + at least one token + [SEP])"
        )
    model_max = getattr(tokenizer, "model_max_length", None)
    if model_max is not None and model_max < _MAX_SANE_MODEL_LENGTH and seq_len > model_max:
        raise ConfigError(
            f"seq_len={seq_len} exceeds the tokenizer's model_max_length={model_max}: lower seq_len"
        )
    if max_docs is not None and (
        isinstance(max_docs, bool) or not isinstance(max_docs, int) or max_docs < 1
    ):
        raise ConfigError(f"max_docs={max_docs!r} must be a positive integer or None")


def _build_entry(corpora: Path, job: BuildJob) -> PackedCorpus:
    """Build `corpora / job.key` under its file lock, unless another builder finished it first."""
    entry = corpora / job.key
    corpora.mkdir(parents=True, exist_ok=True)
    with FileLock(str(corpora / f"{job.key}.lock")):
        if (found := _try_load(entry)) is not None:
            return found
        for stale in corpora.glob(
            f".{job.key}.tmp-*"
        ):  # the lock is held, so no live builder owns these
            shutil.rmtree(stale, ignore_errors=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{job.key}.tmp-", dir=corpora))
        try:
            with storage.space_for(entry, partial=tmp), phase("tokenisation"):
                build_entry_files(tmp, job)
                storage.publish(tmp, entry)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        corpus = PackedCorpus.load(entry)
    m = corpus.meta
    log.info(
        "corpus %s: %d docs, %d tokens, %d train + %d held-out sequences of %d (%.1fs)",
        job.key,
        m["docs"],
        m["tokens"],
        len(corpus.train),
        len(corpus.heldout),
        job.seq_len,
        m["build_seconds"],
    )
    return corpus


def build_packed_corpus(
    path: str | os.PathLike,
    fmt: str,
    tokenizer,
    seq_len: int,
    cache_dir: str | os.PathLike,
    *,
    heldout_fraction: float | None = None,
    max_docs: int | None = None,
) -> PackedCorpus:
    """Tokenise, split and pack the corpus at `path` (format `fmt`), or reuse its cache entry.

    The entry lives in `cache_dir / "corpora" / <key>`; the key hashes the input files (absolute
    path, size, mtime), `fmt`, the tokenizer (name_or_path, class, vocabulary size, a fingerprint of
    its vocabulary and settings, special ids), `seq_len`, the split parameters and `max_docs`. It is
    built in a temporary sibling directory, sealed with its files' sizes and SHA-256 and renamed
    into place under a file lock on `<key>.lock`: concurrent builders build once, a killed builder
    leaves no entry behind, and an entry damaged since (checked each time it is opened) is rebuilt
    with a warning.

    `heldout_fraction` (default 0.01) holds documents out by a hash of their tokens; `max_docs`
    keeps the first N non-empty documents in reading order.
    """
    _check_build_settings(fmt, tokenizer, seq_len, max_docs)
    split = _split_spec(heldout_fraction)
    origin = Path(path).expanduser()
    files = input_files(origin)
    key = corpus_key(files, fmt, tokenizer, seq_len, split, max_docs)
    corpora = Path(cache_dir).expanduser() / "corpora"
    return _build_entry(
        corpora, BuildJob(files, origin, fmt, tokenizer, seq_len, split, max_docs, key)
    )
