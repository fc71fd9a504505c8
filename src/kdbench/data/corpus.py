"""Raw-text corpus for task-agnostic (pre-training-stage) distillation: read, tokenise, pack, cache.

`iter_documents` reads documents (plain text or WikiExtractor output) from a file or a directory;
`build_packed_corpus` tokenises them, splits them by document into train / held-out, packs each split into
fixed-length sequences and caches the result as memory-mapped `.npy` arrays, opened as a `PackedCorpus`.
MLM masking of the packed sequences lives in `kdbench.data.masking`.

Decisions (all part of the cache key through `CORPUS_FORMAT_VERSION`):

* Documents are tokenised with `add_special_tokens=False`, no truncation and `split_special_tokens=True`, so
  text that happens to spell a special token ("[SEP]", "<s>") is tokenised as ordinary text.
* Packing: within a split, the documents' tokens are concatenated in reading order with one separator token
  (`sep_token_id`) *between* consecutive documents, and the stream is cut into windows of `seq_len - 2` tokens,
  each stored as `[CLS] window [SEP]`. A long document is split across as many sequences as it needs; a
  sequence may hold the end of one document, a separator, and the start of the next. Nothing is dropped.
* The last sequence of a split holds the remainder of the stream: `[CLS] rest [SEP] [PAD] ...`, with
  `attention_mask` 0 on the padding. It is always kept, however short, so every document's tokens are stored.
  Every other sequence is full (mask all ones).
* Documents that tokenise to zero tokens (e.g. only characters the tokenizer deletes) have nothing to store;
  they are counted in the metadata (`docs_without_tokens`), not stored.
* Held-out split, by document: a document is held out when the 64-bit BLAKE2b hash of its text, as a fraction
  of 2**64, is below `heldout_fraction` (default 0.01). The decision depends only on the text, so it is stable
  when files are added or reordered, and exact duplicate documents always land in the same split (no
  train/held-out leakage through duplicates).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from filelock import FileLock
from torch.utils.data import Dataset

from kdbench import storage
from kdbench.data.readers import input_files, read_documents, reader_for
from kdbench.errors import ConfigError, DataError
from kdbench.training.signals import check_stop, phase

log = logging.getLogger(__name__)

CORPUS_FORMAT_VERSION = 1
DEFAULT_HELDOUT_FRACTION = 0.01
_TOKENISE_BATCH = 256  # documents per fast-tokenizer call
_PACK_CHUNK_ROWS = 16384  # rows written per step when packing a split onto disk
_MAX_SANE_MODEL_LENGTH = 1_000_000  # tokenizers without a real limit report ~1e30


# ------------------------------------------------------------------------------------------------- packing


def pack_tokens(stream: np.ndarray, seq_len: int, cls_id: int, sep_id: int, pad_id: int, *, out: np.ndarray | None = None):
    """Pack a flat token stream into rows `[CLS] window [SEP]` of exactly `seq_len` ids (see module docstring).

    Returns `(rows, final_length)`: rows has shape `[ceil(len(stream) / (seq_len - 2)), seq_len]` and
    `final_length` is the number of attended positions in the last row (`seq_len` when it is full). `out`, when
    given, is filled in place (e.g. a memory-mapped array of the right shape) in chunks.
    """
    if seq_len < 3:
        raise ConfigError(f"seq_len={seq_len} leaves no room for text between [CLS] and [SEP]: use seq_len >= 3")
    width = seq_len - 2
    n_full, rest = divmod(len(stream), width)
    n_rows = n_full + (rest > 0)
    if out is None:
        out = np.empty((n_rows, seq_len), dtype=stream.dtype)
    elif out.shape != (n_rows, seq_len):
        raise ValueError(f"out has shape {out.shape}, packing needs {(n_rows, seq_len)}")
    for start in range(0, n_full, _PACK_CHUNK_ROWS):
        stop = min(start + _PACK_CHUNK_ROWS, n_full)
        block = out[start:stop]
        block[:, 0] = cls_id
        block[:, 1 : seq_len - 1] = np.asarray(stream[start * width : stop * width]).reshape(stop - start, width)
        block[:, seq_len - 1] = sep_id
    final_length = seq_len
    if rest:
        last = out[n_full]
        last[0] = cls_id
        last[1 : rest + 1] = stream[n_full * width :]
        last[rest + 1] = sep_id
        last[rest + 2 :] = pad_id
        final_length = rest + 2
    return out, final_length


def is_heldout(text: str, fraction: float) -> bool:
    """Whether a document goes to the held-out split under `heldout_fraction=fraction` (a hash of its text)."""
    digest = hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") < fraction * 2.0**64


# -------------------------------------------------------------------------------------------------- dataset


class PackedDataset(Dataset):
    """One split of a packed corpus, read lazily from a memory-mapped `.npy` array of shape [N, seq_len].

    Item i is `{"input_ids": LongTensor[seq_len], "attention_mask": LongTensor[seq_len]}`. Pickles without the
    memory map (DataLoader workers reopen it).
    """

    def __init__(self, path: str | os.PathLike, final_length: int):
        self.path = Path(path)
        self.final_length = int(final_length)
        self._array: np.ndarray | None = None
        self._shape: tuple[int, int] = tuple(self.array.shape)  # type: ignore[assignment]

    @property
    def array(self) -> np.ndarray:
        """The read-only memory-mapped rows (bulk access without tensor conversion)."""
        if self._array is None:
            self._array = np.load(self.path, mmap_mode="r")
        return self._array

    @property
    def seq_len(self) -> int:
        return self._shape[1]

    def __len__(self) -> int:
        return self._shape[0]

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        n = len(self)
        i = int(index)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"index {index} out of range for a split of {n} sequences")
        input_ids = torch.from_numpy(self.array[i].astype(np.int64))
        attention_mask = torch.ones(self.seq_len, dtype=torch.long)
        if i == n - 1 and self.final_length < self.seq_len:
            attention_mask[self.final_length :] = 0
        return {"input_ids": input_ids, "attention_mask": attention_mask}

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_array"] = None
        return state


@dataclass
class PackedCorpus:
    """A cached packed corpus: `.train` and `.heldout` datasets, `.meta` (counts, settings), `.path` (cache entry).

    `len(corpus)` is the number of sequences in both splits together.
    """

    path: Path
    meta: dict[str, Any]
    train: PackedDataset = field(repr=False)
    heldout: PackedDataset = field(repr=False)

    def __len__(self) -> int:
        return len(self.train) + len(self.heldout)

    @classmethod
    def load(cls, path: str | os.PathLike) -> PackedCorpus:
        """Open a finished cache entry, checking the arrays against the metadata (ValueError when they disagree)."""
        path = Path(path)
        meta = json.loads((path / "meta.json").read_text())
        if meta.get("version") != CORPUS_FORMAT_VERSION:
            raise ValueError(f"cache format version {meta.get('version')} != {CORPUS_FORMAT_VERSION}")
        splits = {}
        for name in ("train", "heldout"):
            info = meta["splits"][name]
            ds = PackedDataset(path / f"{name}.npy", info["final_length"])
            if (len(ds), ds.seq_len) != (info["sequences"], meta["seq_len"]) or str(ds.array.dtype) != meta["dtype"]:
                raise ValueError(f"{name}.npy has shape {ds.array.shape} / dtype {ds.array.dtype}, meta disagrees")
            splits[name] = ds
        return cls(path=path, meta=meta, **splits)


# -------------------------------------------------------------------------------------------- build + cache


def _tokenizer_fingerprint(tokenizer) -> str:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        # truncation / padding are call-time state (every call rewrites them), not part of what tokens come out
        settings = {k: v for k, v in json.loads(backend.to_str()).items() if k not in ("truncation", "padding")}
        payload = json.dumps(settings, sort_keys=True)
    else:
        payload = json.dumps(sorted(tokenizer.get_vocab().items()))
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:16]


def _token_dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16) if vocab_size <= 2**16 else np.dtype(np.int32)


def _split_spec(heldout_fraction: float | None) -> dict[str, Any]:
    """The held-out rule as it enters the cache key and the metadata."""
    fraction = DEFAULT_HELDOUT_FRACTION if heldout_fraction is None else float(heldout_fraction)
    if not 0.0 <= fraction < 1.0:
        raise ConfigError(f"heldout_fraction={heldout_fraction!r} must be in [0, 1)")
    return {"mode": "hash_fraction", "fraction": fraction}


def _special_ids(tokenizer) -> dict[str, int]:
    ids = {"cls": tokenizer.cls_token_id, "sep": tokenizer.sep_token_id, "pad": tokenizer.pad_token_id}
    missing = [name for name, value in ids.items() if value is None]
    if missing:
        raise ConfigError(
            f"tokenizer {tokenizer.name_or_path or type(tokenizer).__name__} has no {'/'.join(missing)} token: packing needs "
            "cls, sep and pad tokens (use a BERT-family tokenizer)"
        )
    return ids


def corpus_key(files: Sequence[Path], fmt: str, tokenizer, seq_len: int, split: Mapping[str, Any], max_docs: int | None) -> str:
    """The cache entry name: a hash of the input files (absolute path, size, mtime), format, tokenizer and settings."""
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
            **_special_ids(tokenizer),
        },
        "seq_len": seq_len,
        "split": dict(split),
        "max_docs": max_docs,
    }
    digest = hashlib.sha256(json.dumps(spec, sort_keys=True).encode("utf-8")).hexdigest()[:20]
    return f"{fmt}-L{seq_len}-{digest}"


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


def _write_split(raw: Path, npy: Path, dtype: np.dtype, seq_len: int, ids: Mapping[str, int]) -> tuple[int, int]:
    """Pack a raw stream file into `npy` (memory-mapped writes); returns (sequences, final_length)."""
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


def _tokenise_batches(docs: Iterable[str], tokenizer) -> Iterator[tuple[str, list[int]]]:
    """Each document with its token ids, tokenised `_TOKENISE_BATCH` documents per tokenizer call; a stop signal
    ends it between calls."""
    docs = iter(docs)
    while batch := list(itertools.islice(docs, _TOKENISE_BATCH)):
        check_stop()
        enc = tokenizer(batch, add_special_tokens=False, truncation=False, split_special_tokens=True,
                        return_attention_mask=False, return_token_type_ids=False, verbose=False)
        yield from zip(batch, enc["input_ids"])


@dataclass(frozen=True)
class _BuildJob:
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


def _write_streams(tmp: Path, job: _BuildJob, dtype: np.dtype, sep_id: int) -> tuple[dict[str, _SplitWriter], dict[str, int]]:
    """Tokenise the job's documents into one raw stream file per split; returns the writers and document counts."""
    writers = {name: _SplitWriter(tmp / f"{name}.stream", dtype, sep_id) for name in ("train", "heldout")}
    counts = {"docs": 0, "docs_without_tokens": 0}
    try:
        for text, tokens in _tokenise_batches(job.documents(), job.tokenizer):
            counts["docs"] += 1
            if counts["docs"] % 100_000 == 0:
                log.info("corpus %s: %d documents tokenised", job.key, counts["docs"])
            if not tokens:
                counts["docs_without_tokens"] += 1
                continue
            writers["heldout" if is_heldout(text, job.split["fraction"]) else "train"].add(tokens)
    finally:
        for w in writers.values():
            w.close()
    return writers, counts


def _check_streams(writers: Mapping[str, _SplitWriter], job: _BuildJob) -> None:
    """Refuse a corpus with no tokens at all, or with none left for training."""
    if writers["train"].docs + writers["heldout"].docs == 0:
        raise DataError(f"no document under {job.origin} produced any token with tokenizer {job.tokenizer.name_or_path}: "
                        "check the corpus text")
    if writers["train"].docs == 0:
        raise DataError(f"every document under {job.origin} went to the held-out split ({dict(job.split)}): "
                        "lower heldout_fraction or add text")


def _pack_split(writer: _SplitWriter, npy: Path, dtype: np.dtype, seq_len: int, ids: Mapping[str, int]) -> dict[str, int]:
    """Pack one split's stream file into `npy`, delete the stream, and return the split's metadata."""
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


def _build(tmp: Path, job: _BuildJob) -> None:
    """Write the cache entry's files into `tmp`: `train.npy`, `heldout.npy` and `meta.json`."""
    started = time.perf_counter()
    log.info("building corpus %s from %d file(s) under %s", job.key, len(job.files), job.origin)
    ids = _special_ids(job.tokenizer)
    vocab_size = len(job.tokenizer)
    dtype = _token_dtype(vocab_size)
    writers, counts = _write_streams(tmp, job, dtype, ids["sep"])
    _check_streams(writers, job)
    splits = {name: _pack_split(w, tmp / f"{name}.npy", dtype, job.seq_len, ids) for name, w in writers.items()}
    if splits["heldout"]["docs"] == 0 and job.split["fraction"]:
        log.warning("corpus %s: the held-out split is empty (%s over %d documents)", job.key, dict(job.split), counts["docs"])
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


def _try_load(entry: Path) -> PackedCorpus | None:
    """The entry when it exists and matches its manifest (a damaged one is removed with a warning)."""
    if not storage.intact(entry, "the corpus cache entry"):
        return None
    return PackedCorpus.load(entry)


def _check_build_settings(fmt: str, tokenizer, seq_len: int, max_docs: int | None) -> None:
    reader_for(fmt)
    if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 3:
        raise ConfigError(f"seq_len={seq_len!r} must be an integer >= 3 ([CLS] + at least one token + [SEP])")
    model_max = getattr(tokenizer, "model_max_length", None)
    if model_max is not None and model_max < _MAX_SANE_MODEL_LENGTH and seq_len > model_max:
        raise ConfigError(f"seq_len={seq_len} exceeds the tokenizer's model_max_length={model_max}: lower seq_len")
    if max_docs is not None and (isinstance(max_docs, bool) or not isinstance(max_docs, int) or max_docs < 1):
        raise ConfigError(f"max_docs={max_docs!r} must be a positive integer or None")


def _build_entry(corpora: Path, job: _BuildJob) -> PackedCorpus:
    """Build the entry `corpora / job.key` under its file lock, unless another builder finished it first."""
    entry = corpora / job.key
    corpora.mkdir(parents=True, exist_ok=True)
    with FileLock(str(corpora / f"{job.key}.lock")):
        if (found := _try_load(entry)) is not None:
            return found
        for stale in corpora.glob(f".{job.key}.tmp-*"):  # the lock is held, so no live builder owns these
            shutil.rmtree(stale, ignore_errors=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{job.key}.tmp-", dir=corpora))
        try:
            with storage.space_for(entry, partial=tmp), phase("tokenisation"):
                _build(tmp, job)
                storage.publish(tmp, entry)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        corpus = PackedCorpus.load(entry)
    m = corpus.meta
    log.info(
        "corpus %s: %d docs, %d tokens, %d train + %d held-out sequences of %d (%.1fs)",
        job.key, m["docs"], m["tokens"], len(corpus.train), len(corpus.heldout), job.seq_len, m["build_seconds"],
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

    The entry lives in `cache_dir / "corpora" / <key>`; the key hashes the input files (absolute path, size,
    mtime), `fmt`, the tokenizer (name_or_path, class, vocabulary size, a fingerprint of its vocabulary and
    settings, special ids), `seq_len`, the split parameters and `max_docs`. It is built in a temporary sibling
    directory, sealed with its files' sizes and SHA-256 and renamed into place under a file lock on `<key>.lock`:
    concurrent builders build once, a killed builder leaves no entry behind, and an entry damaged since (checked
    each time it is opened) is rebuilt with a warning.

    `heldout_fraction` (default 0.01) holds documents out by a hash of their text; `max_docs` keeps the first N
    non-empty documents in reading order.
    """
    _check_build_settings(fmt, tokenizer, seq_len, max_docs)
    split = _split_spec(heldout_fraction)
    origin = Path(path).expanduser()
    files = input_files(origin)
    key = corpus_key(files, fmt, tokenizer, seq_len, split, max_docs)
    corpora = Path(cache_dir).expanduser() / "corpora"
    return _build_entry(corpora, _BuildJob(files, origin, fmt, tokenizer, seq_len, split, max_docs, key))
