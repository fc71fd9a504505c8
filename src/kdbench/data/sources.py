"""Where the raw text comes from: local files, or Hugging Face datasets written once to a local text
file, a blank line between documents.

A Hub dataset's document is `rows_per_document` consecutive non-empty rows joined by newlines (its
last one may be shorter): 1 where a row is a whole document (Wikipedia's articles), more where a
row is one sentence of a continuous text (BookCorpus), so that packing separates documents, not
sentences, and the held-out split (by a hash of each document's tokens) keeps a document's
sentences together.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from filelock import FileLock

from kdbench.errors import DataError
from kdbench.planning.specs import CorpusSpec, HubDatasetSpec
from kdbench.runtime import storage


def corpus_files(corpus: CorpusSpec, cache_dir: Path) -> tuple[Path, str]:
    """(a file or folder of text, its format) for the corpus."""
    if not corpus.hf_datasets:
        return corpus.path, corpus.format
    return materialise_hf(corpus, cache_dir), "text"


def materialise_hf(corpus: CorpusSpec, cache_dir: Path) -> Path:
    """Stream the Hugging Face datasets' documents once into a local text file (blank line between
    documents)."""
    specs = corpus.hf_datasets
    listed = [dataclasses.asdict(spec) for spec in specs]
    key = hashlib.sha256(json.dumps(listed, sort_keys=True).encode()).hexdigest()[:16]
    target = cache_dir / "hf_corpora" / f"{corpus.name}-{key}.txt"
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target) + ".lock"):
        if storage.intact(target, "the Hub corpus's cache entry"):
            return target
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        try:
            with storage.space_for(target, partial=tmp), tmp.open("w") as handle:
                for text in hub_documents(specs):
                    handle.write(text + "\n\n")
            storage.publish(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)
    return target


def hub_documents(specs: Sequence[HubDatasetSpec]) -> Iterator[str]:
    """Each dataset's documents in turn (`rows_per_document` non-empty rows each), blank lines
    folded; a dataset that cannot be read is one DataError."""
    import datasets

    for spec in specs:
        try:
            rows = datasets.load_dataset(spec.path, spec.name, split=spec.split, streaming=True)
            yield from grouped((text_of(row, spec) for row in rows), spec.rows_per_document)
        except DataError:
            raise
        except Exception as exc:
            raise DataError(
                f"could not read {spec.path} from the Hugging Face Hub ({type(exc).__name__}); "
                "offline, "
                "use corpus=local with corpus.path (or $KDBENCH_CORPUS) pointing at local text"
            ) from exc


def text_of(row: dict, spec: HubDatasetSpec) -> str:
    """The text of a Hub dataset's row: its `field` column."""
    if spec.field not in row:
        raise DataError(
            f"{spec.path} has no column {spec.field!r} (it has {', '.join(row)}): set its entry's "
            "field in corpus.hf_datasets to its text column"
        )
    return row[spec.field]


def grouped(texts: Iterable[str], size: int) -> Iterator[str]:
    """Every `size` consecutive non-empty texts (blank lines folded, stripped) joined by newlines;
    the last document holds the rest."""
    kept = filter(None, (re.sub(r"\n\s*\n+", "\n", text).strip() for text in texts))
    while group := list(itertools.islice(kept, size)):
        yield "\n".join(group)
