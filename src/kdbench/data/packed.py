"""The packed corpus format: fixed-length `[CLS] window [SEP]` rows in memory-mapped `.npy` arrays,
one per split, opened as a `PackedCorpus`.

* Packing: within a split, the documents' tokens are concatenated in reading order with one
  separator token (`sep_token_id`) *between* consecutive documents, and the stream is cut into
  windows of `seq_len - 2` tokens, each stored as `[CLS] window [SEP]`. A long document is split
  across as many sequences as it needs; a sequence may hold the end of one document, a separator,
  and the start of the next. Nothing is dropped.
* The last sequence of a split holds the remainder of the stream: `[CLS] rest [SEP] [PAD] ...`, with
  `attention_mask` 0 on the padding. It is always kept, however short, so every document's tokens
  are stored. Every other sequence is full (mask all ones).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from kdbench.errors import ConfigError

CORPUS_FORMAT_VERSION = 2
_PACK_CHUNK_ROWS = 16384  # rows written per step when packing a split onto disk


def pack_tokens(
    stream: np.ndarray,
    seq_len: int,
    cls_id: int,
    sep_id: int,
    pad_id: int,
    *,
    out: np.ndarray | None = None,
):
    """Pack a flat token stream into rows `[CLS] window [SEP]` of exactly `seq_len` ids (see module
    docstring).

    Returns `(rows, final_length)`: rows has shape `[ceil(len(stream) / (seq_len - 2)), seq_len]`
    and `final_length` is the number of attended positions in the last row (`seq_len` when it is
    full). `out`, when given, is filled in place (e.g. a memory-mapped array of the right shape) in
    chunks.
    """
    if seq_len < 3:
        raise ConfigError(
            f"seq_len={seq_len} leaves no room for text between [CLS] and [SEP]: use seq_len >= 3"
        )
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
        block[:, 1 : seq_len - 1] = np.asarray(stream[start * width : stop * width]).reshape(
            stop - start, width
        )
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


class PackedDataset(Dataset):
    """One split of a packed corpus, read lazily from a memory-mapped `.npy` array of shape [N,
    seq_len].

    Item i is `{"input_ids": LongTensor[seq_len], "attention_mask": LongTensor[seq_len]}`. Pickles
    without the memory map (DataLoader workers reopen it).
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
    """A cached packed corpus: `.train` and `.heldout` datasets, `.meta` (counts, settings), `.path`
    (cache entry).

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
        """A finished cache entry, its arrays checked against its metadata (else ValueError)."""
        path = Path(path)
        meta = json.loads((path / "meta.json").read_text())
        if meta.get("version") != CORPUS_FORMAT_VERSION:
            raise ValueError(
                f"cache format version {meta.get('version')} != {CORPUS_FORMAT_VERSION}"
            )
        splits = {}
        for name in ("train", "heldout"):
            info = meta["splits"][name]
            ds = PackedDataset(path / f"{name}.npy", info["final_length"])
            if (len(ds), ds.seq_len) != (info["sequences"], meta["seq_len"]) or str(
                ds.array.dtype
            ) != meta["dtype"]:
                raise ValueError(
                    f"{name}.npy has shape {ds.array.shape} / dtype {ds.array.dtype}, meta "
                    "disagrees"
                )
            splits[name] = ds
        return cls(path=path, meta=meta, **splits)
