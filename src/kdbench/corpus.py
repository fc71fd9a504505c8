"""Raw-text corpus for task-agnostic (pre-training-stage) distillation: read, tokenise, pack, cache, shard, mask.

Pipeline: `iter_documents` reads documents (plain text or WikiExtractor output) from a file or a directory;
`build_packed_corpus` tokenises them, splits them by document into train / held-out, packs each split into
fixed-length sequences and caches the result as memory-mapped `.npy` arrays; `MaskingCollator` applies a fresh
BERT-style MLM mask to every batch.

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
* Held-out split, by document: by default (`heldout_fraction`, 0.01) a document is held out when the 64-bit
  BLAKE2b hash of its text, as a fraction of 2**64, is below the fraction. The decision depends only on the
  text, so it is stable when files are added or reordered, and exact duplicate documents always land in the same
  split (no train/held-out leakage through duplicates). Alternatively `heldout_docs=N` holds out the last N
  documents in reading order.
* Sharding for data-parallel ranks is strided (`rank, rank + world_size, ...`): shards differ in length by at
  most one and cover every index exactly once (or `drop_last=True` for equal lengths).
"""

from __future__ import annotations

import collections
import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from filelock import FileLock
from torch.utils.data import Dataset, Subset

from kdbench.errors import ConfigError, DataError

log = logging.getLogger(__name__)

CORPUS_FORMAT_VERSION = 1
DEFAULT_HELDOUT_FRACTION = 0.01
CACHE_ENV = "KDBENCH_CACHE"
IGNORE_INDEX = -100
_TOKENISE_BATCH = 256  # documents per fast-tokenizer call
_PACK_CHUNK_ROWS = 16384  # rows written per step when packing a split onto disk
_MAX_SANE_MODEL_LENGTH = 1_000_000  # tokenizers without a real limit report ~1e30


# --------------------------------------------------------------------------------------------------- readers


def _open_text(path: Path):
    return open(path, encoding="utf-8-sig", newline=None)


def _decode_error(path: Path, exc: UnicodeDecodeError) -> DataError:
    return DataError(f"{path} is not valid UTF-8 (byte {exc.start}): re-encode the corpus as UTF-8 or remove the file")


def read_text(path: str | os.PathLike) -> Iterator[str]:
    """Plain text: one document per block of lines separated by one or more blank (or whitespace-only) lines.

    Lines inside a block are joined with a newline; each document is stripped; empty ones are skipped.
    """
    path = Path(path)
    lines: list[str] = []
    try:
        with _open_text(path) as f:
            for line in f:
                line = line.rstrip()
                if line:
                    lines.append(line)
                elif lines:
                    text = "\n".join(lines).strip()
                    lines = []
                    if text:
                        yield text
    except UnicodeDecodeError as exc:
        raise _decode_error(path, exc) from exc
    text = "\n".join(lines).strip()
    if text:
        yield text


def _is_doc_open(line: str) -> bool:
    return (line.startswith("<doc ") or line.startswith("<doc>")) and line.endswith(">")


def read_wikiextractor(path: str | os.PathLike) -> Iterator[str]:
    """WikiExtractor output: `<doc id=".." url=".." title="..">` lines .. `</doc>`.

    A document is the non-empty lines between the tags, joined with newlines (the first one, the title repeated,
    is kept: it is real text). A missing final `</doc>` is tolerated (the document ends at end of file, or at the
    next `<doc ...>` line). Text outside `<doc>` blocks is ignored.
    """
    path = Path(path)
    lines: list[str] | None = None  # None: outside a document

    def flush(buf: list[str] | None) -> str:
        return "\n".join(buf).strip() if buf else ""

    try:
        with _open_text(path) as f:
            for raw in f:
                line = raw.strip()
                if _is_doc_open(line):
                    if text := flush(lines):
                        yield text
                    lines = []
                elif line == "</doc>":
                    if text := flush(lines):
                        yield text
                    lines = None
                elif line and lines is not None:
                    lines.append(line)
    except UnicodeDecodeError as exc:
        raise _decode_error(path, exc) from exc
    if text := flush(lines):
        yield text


READERS: dict[str, Callable[[str | os.PathLike], Iterator[str]]] = {
    "text": read_text,
    "wikiextractor": read_wikiextractor,
}


def _reader(fmt: str) -> Callable[[str | os.PathLike], Iterator[str]]:
    if fmt not in READERS:
        raise ConfigError(f"unknown corpus format {fmt!r}: choose one of {sorted(READERS)}")
    return READERS[fmt]


def input_files(path: str | os.PathLike) -> list[Path]:
    """The files a corpus path stands for: the file itself, or every regular file below a directory.

    Directory contents are recursive and sorted by relative path; files and directories whose name starts
    with "." are skipped.
    """
    root = Path(path).expanduser()
    if root.is_file():
        return [root]
    if not root.exists():
        raise DataError(f"corpus path {root} does not exist: point it at a text file or a directory of text files")
    if not root.is_dir():
        raise DataError(f"corpus path {root} is neither a regular file nor a directory: point it at a file or a directory")
    found: list[tuple[tuple[str, ...], Path]] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        for name in filenames:
            full = Path(dirpath) / name
            if not name.startswith(".") and full.is_file():
                found.append((full.relative_to(root).parts, full))
    if not found:
        raise DataError(f"corpus directory {root} holds no (non-hidden) files: put the corpus text files in it")
    return [full for _, full in sorted(found)]


def _documents(files: Sequence[Path], fmt: str, origin: Path) -> Iterator[str]:
    reader = _reader(fmt)
    count = 0
    for file in files:
        for doc in reader(file):
            count += 1
            yield doc
    if count == 0:
        hint = "is it WikiExtractor output (<doc ...> ... </doc>)? use fmt='text' for plain text" if fmt == "wikiextractor" else (
            "add text (documents are blocks separated by blank lines)"
        )
        raise DataError(f"corpus path {origin} contains no non-empty document in format {fmt!r}: {hint}")


def iter_documents(path: str | os.PathLike, fmt: str) -> Iterator[str]:
    """Every document under `path` (a file or a directory, see `input_files`) read with the `fmt` reader.

    Path and format errors raise immediately; a corpus without any non-empty document raises `DataError` when
    the iteration ends.
    """
    _reader(fmt)
    files = input_files(path)
    return _documents(files, fmt, Path(path))


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


def unpack_tokens(rows: np.ndarray, final_length: int) -> np.ndarray:
    """The inverse of `pack_tokens`: the flat token stream (without the added [CLS] / [SEP] / padding)."""
    if len(rows) == 0:
        return np.empty(0, dtype=rows.dtype)
    body = np.asarray(rows[:-1, 1:-1]).reshape(-1)
    return np.concatenate([body, np.asarray(rows[-1, 1 : final_length - 1])])


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


def default_cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or "~/.cache/kdbench").expanduser()


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


def _split_spec(heldout_fraction: float | None, heldout_docs: int | None) -> dict[str, Any]:
    if heldout_fraction is not None and heldout_docs is not None:
        raise ConfigError("give heldout_fraction or heldout_docs, not both")
    if heldout_docs is not None:
        if isinstance(heldout_docs, bool) or not isinstance(heldout_docs, int) or heldout_docs < 0:
            raise ConfigError(f"heldout_docs={heldout_docs!r} must be a non-negative integer (the last N documents)")
        return {"mode": "last_docs", "docs": heldout_docs}
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

    @property
    def stream_length(self) -> int:
        return self.tokens + max(self.docs - 1, 0)


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
    batch: list[str] = []

    def encode(texts: list[str]):
        enc = tokenizer(
            texts,
            add_special_tokens=False,
            truncation=False,
            split_special_tokens=True,
            return_attention_mask=False,
            return_token_type_ids=False,
            verbose=False,
        )
        return zip(texts, enc["input_ids"])

    for doc in docs:
        batch.append(doc)
        if len(batch) == _TOKENISE_BATCH:
            yield from encode(batch)
            batch = []
    if batch:
        yield from encode(batch)


def _build(tmp: Path, files: Sequence[Path], origin: Path, fmt: str, tokenizer, seq_len: int, split: Mapping[str, Any],
           max_docs: int | None, key: str) -> None:
    started = time.perf_counter()
    ids = _special_ids(tokenizer)
    vocab_size = len(tokenizer)
    dtype = _token_dtype(vocab_size)
    writers = {name: _SplitWriter(tmp / f"{name}.stream", dtype, ids["sep"]) for name in ("train", "heldout")}
    pending: collections.deque[list[int]] = collections.deque()  # the last N documents, for heldout_docs=N
    docs_read = docs_without_tokens = 0
    try:
        docs = _documents(files, fmt, origin)
        if max_docs is not None:
            docs = (d for i, d in zip(range(max_docs), docs))
        for text, tokens in _tokenise_batches(docs, tokenizer):
            docs_read += 1
            if docs_read % 100_000 == 0:
                log.info("corpus %s: %d documents tokenised", key, docs_read)
            if not tokens:
                docs_without_tokens += 1
                continue
            if split["mode"] == "hash_fraction":
                writers["heldout" if is_heldout(text, split["fraction"]) else "train"].add(tokens)
            else:
                pending.append(tokens)
                if len(pending) > split["docs"]:
                    writers["train"].add(pending.popleft())
        while pending:
            writers["heldout"].add(pending.popleft())
    finally:
        for w in writers.values():
            w.close()
    if writers["train"].docs + writers["heldout"].docs == 0:
        raise DataError(
            f"no document under {origin} produced any token with tokenizer {tokenizer.name_or_path}: check the corpus text"
        )
    if writers["train"].docs == 0:
        raise DataError(
            f"every document under {origin} went to the held-out split ({dict(split)}): "
            "lower heldout_fraction / heldout_docs or add text"
        )
    splits = {}
    for name, w in writers.items():
        sequences, final_length = _write_split(w.path, tmp / f"{name}.npy", dtype, seq_len, ids)
        w.path.unlink()
        splits[name] = {
            "docs": w.docs,
            "tokens": w.tokens,
            "separators": max(w.docs - 1, 0),
            "sequences": sequences,
            "final_length": final_length,
            "padding": seq_len - final_length if sequences else 0,
        }
    if splits["heldout"]["docs"] == 0 and (split.get("fraction") or split.get("docs")):
        log.warning("corpus %s: the held-out split is empty (%s over %d documents)", key, dict(split), docs_read)
    meta = {
        "version": CORPUS_FORMAT_VERSION,
        "key": key,
        "source": str(origin.resolve()),
        "files": len(files),
        "fmt": fmt,
        "tokenizer": str(tokenizer.name_or_path),
        "vocab_size": vocab_size,
        "special_ids": ids,
        "seq_len": seq_len,
        "dtype": dtype.name,
        "split": dict(split),
        "max_docs": max_docs,
        "packing": "[CLS] window [SEP]; [SEP] between documents; last sequence padded",
        "docs": docs_read,
        "docs_without_tokens": docs_without_tokens,
        "tokens": splits["train"]["tokens"] + splits["heldout"]["tokens"],
        "sequences": splits["train"]["sequences"] + splits["heldout"]["sequences"],
        "splits": splits,
        "build_seconds": round(time.perf_counter() - started, 3),
    }
    (tmp / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")


def _try_load(entry: Path) -> PackedCorpus | None:
    if not (entry / "meta.json").is_file():
        return None
    try:
        return PackedCorpus.load(entry)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("corpus cache entry %s is unreadable (%s): rebuilding it", entry, exc)
        return None


def build_packed_corpus(
    path: str | os.PathLike,
    fmt: str,
    tokenizer,
    seq_len: int = 128,
    cache_dir: str | os.PathLike | None = None,
    *,
    heldout_fraction: float | None = None,
    heldout_docs: int | None = None,
    max_docs: int | None = None,
) -> PackedCorpus:
    """Tokenise, split and pack the corpus at `path` (format `fmt`), or reuse its cache entry.

    The entry lives in `cache_dir / "corpora" / <key>` (`cache_dir` defaults to $KDBENCH_CACHE, else
    ~/.cache/kdbench); the key hashes the input files (absolute path, size, mtime), `fmt`, the tokenizer
    (name_or_path, class, vocabulary size, a fingerprint of its vocabulary and settings, special ids), `seq_len`,
    the split parameters and `max_docs`. It is built in a temporary sibling directory and renamed into place under
    a file lock on `<key>.lock`: concurrent builders build once, a killed builder leaves no entry behind.

    Held-out: `heldout_fraction` (default 0.01, by a hash of each document's text) or `heldout_docs` (the last N
    documents), not both. `max_docs` keeps the first N non-empty documents in reading order.
    """
    _reader(fmt)
    if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 3:
        raise ConfigError(f"seq_len={seq_len!r} must be an integer >= 3 ([CLS] + at least one token + [SEP])")
    model_max = getattr(tokenizer, "model_max_length", None)
    if model_max is not None and model_max < _MAX_SANE_MODEL_LENGTH and seq_len > model_max:
        raise ConfigError(f"seq_len={seq_len} exceeds the tokenizer's model_max_length={model_max}: lower seq_len")
    if max_docs is not None and (isinstance(max_docs, bool) or not isinstance(max_docs, int) or max_docs < 1):
        raise ConfigError(f"max_docs={max_docs!r} must be a positive integer or None")
    split = _split_spec(heldout_fraction, heldout_docs)
    origin = Path(path).expanduser()
    files = input_files(origin)
    key = corpus_key(files, fmt, tokenizer, seq_len, split, max_docs)
    corpora = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    corpora = corpora / "corpora"
    entry = corpora / key
    if (found := _try_load(entry)) is not None:
        return found
    corpora.mkdir(parents=True, exist_ok=True)
    with FileLock(str(corpora / f"{key}.lock")):
        if (found := _try_load(entry)) is not None:
            return found
        for stale in corpora.glob(f".{key}.tmp-*"):  # left by a killed builder; we hold the lock, so no one owns it
            shutil.rmtree(stale, ignore_errors=True)
        if entry.exists():  # present but unreadable
            shutil.rmtree(entry)
        tmp = Path(tempfile.mkdtemp(prefix=f".{key}.tmp-", dir=corpora))
        try:
            log.info("building corpus %s from %d file(s) under %s", key, len(files), origin)
            _build(tmp, files, origin, fmt, tokenizer, seq_len, split, max_docs, key)
            os.rename(tmp, entry)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        corpus = PackedCorpus.load(entry)
    m = corpus.meta
    log.info(
        "corpus %s: %d docs, %d tokens, %d train + %d held-out sequences of %d (%.1fs)",
        key, m["docs"], m["tokens"], len(corpus.train), len(corpus.heldout), seq_len, m["build_seconds"],
    )
    return corpus


# ------------------------------------------------------------------------------------------------- sharding


def shard_indices(n: int, rank: int, world_size: int, *, drop_last: bool = False) -> range:
    """Indices of rank `rank` out of `world_size` over `n` items: strided (`rank, rank + world_size, ...`).

    Shards are disjoint and together cover `range(n)` exactly once; their lengths differ by at most one. With
    `drop_last=True` the last `n % world_size` items are left out so every rank gets exactly `n // world_size`.
    """
    if world_size < 1 or not 0 <= rank < world_size:
        raise ConfigError(f"rank={rank} / world_size={world_size}: need world_size >= 1 and 0 <= rank < world_size")
    stop = n - n % world_size if drop_last else n
    return range(rank, stop, world_size)


def shard(dataset: Dataset, rank: int, world_size: int, *, drop_last: bool = False) -> Subset:
    """The rank's strided subset of `dataset` (see `shard_indices`). Equivalent to an unshuffled
    `DistributedSampler` without padding; shuffle within the shard with an ordinary seeded sampler."""
    return Subset(dataset, shard_indices(len(dataset), rank, world_size, drop_last=drop_last))


# -------------------------------------------------------------------------------------------------- masking


@dataclass(frozen=True)
class MaskingSpec:
    """What MLM masking needs from a tokenizer: the vocabulary size (random replacements are drawn uniformly
    from `range(vocab_size)`, as BERT), the [MASK] id, and the ids that are never chosen ([CLS], [SEP], [PAD], ...)."""

    vocab_size: int
    mask_token_id: int
    special_ids: tuple[int, ...]

    @classmethod
    def from_tokenizer(cls, tokenizer) -> MaskingSpec:
        if tokenizer.mask_token_id is None:
            raise ConfigError(f"tokenizer {tokenizer.name_or_path} has no mask token: MLM masking needs one")
        specials = set(tokenizer.all_special_ids)
        if tokenizer.pad_token_id is not None:
            specials.add(tokenizer.pad_token_id)
        return cls(len(tokenizer), int(tokenizer.mask_token_id), tuple(sorted(specials)))


def _masking_spec(source, vocab_size, mask_token_id, special_ids) -> MaskingSpec:
    base = None
    if isinstance(source, MaskingSpec):
        base = source
    elif source is not None:
        base = MaskingSpec.from_tokenizer(source)
    vocab_size = vocab_size if vocab_size is not None else (base.vocab_size if base else None)
    mask_token_id = mask_token_id if mask_token_id is not None else (base.mask_token_id if base else None)
    special_ids = special_ids if special_ids is not None else (base.special_ids if base else None)
    if vocab_size is None or mask_token_id is None or special_ids is None:
        raise ConfigError("mask_tokens needs a tokenizer / MaskingSpec, or vocab_size, mask_token_id and special_ids")
    return MaskingSpec(int(vocab_size), int(mask_token_id), tuple(int(i) for i in special_ids))


def mask_tokens(
    input_ids: torch.Tensor,
    tokenizer_or_spec=None,
    *,
    mlm_probability: float = 0.15,
    generator: torch.Generator | None = None,
    vocab_size: int | None = None,
    mask_token_id: int | None = None,
    special_ids: Iterable[int] | None = None,
    attention_mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT's dynamic MLM masking; returns `(masked_input_ids, labels)` and leaves `input_ids` unchanged.

    Each position that is not a special id (and, when `attention_mask` is given, is attended) is chosen
    independently with probability `mlm_probability`; a chosen position becomes [MASK] with probability 0.8, a
    token drawn uniformly from the whole vocabulary with probability 0.1, and stays as is otherwise. `labels`
    holds the original id at chosen positions and -100 elsewhere. Randomness comes from `generator` (the default
    torch RNG when None), drawn on the generator's device; every call draws a fresh mask.
    """
    spec = _masking_spec(tokenizer_or_spec, vocab_size, mask_token_id, special_ids)
    if not 0.0 < mlm_probability < 1.0:
        raise ConfigError(f"mlm_probability={mlm_probability} must be in (0, 1)")
    ids = torch.as_tensor(input_ids).long()
    device = generator.device if generator is not None else ids.device
    shape = ids.shape
    maskable = ~torch.isin(ids, torch.tensor(spec.special_ids, dtype=torch.long, device=ids.device))
    if attention_mask is not None:
        maskable &= torch.as_tensor(attention_mask, device=ids.device).bool()
    chosen = (torch.rand(shape, generator=generator, device=device) < mlm_probability).to(ids.device) & maskable
    action = torch.rand(shape, generator=generator, device=device).to(ids.device)
    random_ids = torch.randint(spec.vocab_size, shape, generator=generator, device=device).to(ids.device)
    masked = ids.clone()
    masked[chosen & (action < 0.8)] = spec.mask_token_id
    replace = chosen & (action >= 0.8) & (action < 0.9)
    masked[replace] = random_ids[replace]
    labels = torch.where(chosen, ids, torch.full_like(ids, IGNORE_INDEX))
    return masked, labels


class MaskingCollator:
    """Collate packed examples into `{"input_ids", "attention_mask", "labels"}` with a fresh MLM mask per batch.

    The collator owns a `torch.Generator` seeded with `seed`, so masks are reproducible. Inside a DataLoader
    worker the generator is reseeded once per worker from (`seed`, the worker's torch seed), so workers do not
    repeat each other's masks and each epoch's workers draw new ones (deterministic when torch is seeded).
    `state_dict` / `load_state_dict` carry the generator state across checkpoints.
    """

    def __init__(self, tokenizer_or_spec, *, mlm_probability: float = 0.15, seed: int = 0):
        self.spec = _masking_spec(tokenizer_or_spec, None, None, None)
        if not 0.0 < mlm_probability < 1.0:
            raise ConfigError(f"mlm_probability={mlm_probability} must be in (0, 1)")
        self.mlm_probability = mlm_probability
        self.seed = int(seed)
        self.generator = torch.Generator().manual_seed(self.seed)
        self._worker: tuple[int, int] | None = None

    def _reseed_for_worker(self) -> None:
        info = torch.utils.data.get_worker_info()
        if info is None or self._worker == (info.id, info.seed):
            return
        mixed = hashlib.blake2b(f"{self.seed}:{info.seed}".encode(), digest_size=8).digest()
        self.generator.manual_seed(int.from_bytes(mixed, "big") & (2**63 - 1))
        self._worker = (info.id, info.seed)

    def __call__(self, examples: Sequence[Mapping[str, Any]]) -> dict[str, torch.Tensor]:
        if not examples:
            raise ValueError("MaskingCollator got an empty list of examples")
        input_ids = torch.stack([torch.as_tensor(e["input_ids"]).long() for e in examples])
        if all("attention_mask" in e for e in examples):
            attention_mask = torch.stack([torch.as_tensor(e["attention_mask"]).long() for e in examples])
        else:
            attention_mask = torch.ones_like(input_ids)
        self._reseed_for_worker()
        masked, labels = mask_tokens(
            input_ids, self.spec, mlm_probability=self.mlm_probability, generator=self.generator, attention_mask=attention_mask
        )
        return {"input_ids": masked, "attention_mask": attention_mask, "labels": labels}

    def state_dict(self) -> dict[str, Any]:
        return {"seed": self.seed, "generator": self.generator.get_state()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.seed = int(state["seed"])
        self.generator.set_state(state["generator"])

    def __getstate__(self):
        state = self.__dict__.copy()
        state["generator"] = self.generator.get_state()
        return state

    def __setstate__(self, state):
        generator = torch.Generator()
        generator.set_state(state.pop("generator"))
        self.__dict__.update(state)
        self.generator = generator
