"""Where the raw text comes from: local files, or Hugging Face datasets written once to a local text
file."""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

from filelock import FileLock

from kdbench.errors import DataError
from kdbench.planning.specs import CorpusSpec
from kdbench.runtime import storage


def corpus_files(corpus: CorpusSpec, cache_dir: Path) -> tuple[Path, str]:
    """(a file or folder of text, its format) for the corpus."""
    if not corpus.hf_datasets:
        return corpus.path, corpus.format
    return materialise_hf(corpus, cache_dir), "text"


def materialise_hf(corpus: CorpusSpec, cache_dir: Path) -> Path:
    """Stream the Hugging Face datasets' documents once into a local text file (blank line between
    documents)."""
    specs = list(corpus.hf_datasets)
    key = hashlib.sha256(json.dumps(specs, sort_keys=True).encode()).hexdigest()[:16]
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


def hub_documents(specs: list[dict]) -> Iterator[str]:
    """Each dataset's documents in turn, blank lines folded; a dataset that cannot be read is one
    DataError."""
    import datasets

    for spec in specs:
        try:
            for row in datasets.load_dataset(
                spec["path"], spec.get("name"), split=spec.get("split", "train"), streaming=True
            ):
                if text := re.sub(r"\n\s*\n+", "\n", row[spec.get("field", "text")]).strip():
                    yield text
        except Exception as exc:
            raise DataError(
                f"could not read {spec['path']} from the Hugging Face Hub ({type(exc).__name__}); "
                "offline, "
                "use corpus=local with corpus.path (or $KDBENCH_CORPUS) pointing at local text"
            ) from exc
