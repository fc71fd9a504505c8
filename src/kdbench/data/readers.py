"""Raw-text corpora read as documents: plain text (blank-line separated blocks) or WikiExtractor
output, from a file or every file below a directory."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

from kdbench.data.files import reading
from kdbench.errors import ConfigError, DataError


@contextmanager
def _open_text(path: Path) -> Iterator[TextIO]:
    """`path` open as UTF-8 text; failing to read it is one DataError naming it."""
    with (
        reading(path, "re-encode the corpus as UTF-8 or remove the file"),
        open(path, encoding="utf-8-sig") as f,
    ):
        yield f


def read_text(path: str | os.PathLike) -> Iterator[str]:
    """Plain text: one document per block of lines separated by one or more blank (or
    whitespace-only) lines.

    Lines inside a block are joined with a newline; each document is stripped; empty ones are
    skipped.
    """
    path = Path(path)
    lines: list[str] = []
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
    text = "\n".join(lines).strip()
    if text:
        yield text


def _is_doc_open(line: str) -> bool:
    return (line.startswith("<doc ") or line.startswith("<doc>")) and line.endswith(">")


def read_wikiextractor(path: str | os.PathLike) -> Iterator[str]:
    """WikiExtractor output: `<doc id=".." url=".." title="..">` lines .. `</doc>`.

    A document is the non-empty lines between the tags, joined with newlines (the first one, the
    title repeated, is kept: it is real text). A missing final `</doc>` is tolerated (the document
    ends at end of file, or at the next `<doc ...>` line). Text outside `<doc>` blocks is ignored.
    """
    path = Path(path)
    lines: list[str] | None = None  # None: outside a document

    def flush(buf: list[str] | None) -> str:
        return "\n".join(buf).strip() if buf else ""

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
    if text := flush(lines):
        yield text


READERS: dict[str, Callable[[str | os.PathLike], Iterator[str]]] = {
    "text": read_text,
    "wikiextractor": read_wikiextractor,
}


def reader_for(fmt: str) -> Callable[[str | os.PathLike], Iterator[str]]:
    if fmt not in READERS:
        raise ConfigError(f"unknown corpus format {fmt!r}: choose one of {sorted(READERS)}")
    return READERS[fmt]


def input_files(path: str | os.PathLike) -> list[Path]:
    """The files a corpus path stands for: the file itself, or every regular file below a directory.

    Directory contents are recursive and sorted by relative path; files and directories whose name
    starts with "." are skipped.
    """
    root = Path(path).expanduser()
    if root.is_file():
        return [root]
    if not root.exists():
        raise DataError(
            f"corpus path {root} does not exist: point it at a text file or a directory of text "
            "files"
        )
    if not root.is_dir():
        raise DataError(
            f"corpus path {root} is neither a regular file nor a directory: point it at a file or "
            "a directory"
        )
    found: list[tuple[tuple[str, ...], Path]] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        for name in filenames:
            full = Path(dirpath) / name
            if not name.startswith(".") and full.is_file():
                found.append((full.relative_to(root).parts, full))
    if not found:
        raise DataError(
            f"corpus directory {root} holds no (non-hidden) files: put the corpus text files in it"
        )
    return [full for _, full in sorted(found)]


def read_documents(files: Sequence[Path], fmt: str, origin: Path) -> Iterator[str]:
    reader = reader_for(fmt)
    count = 0
    for file in files:
        for doc in reader(file):
            count += 1
            yield doc
    if count == 0:
        hint = (
            "is it WikiExtractor output (<doc ...> ... </doc>)? use fmt='text' for plain text"
            if fmt == "wikiextractor"
            else ("add text (documents are blocks separated by blank lines)")
        )
        raise DataError(
            f"corpus path {origin} contains no non-empty document in format {fmt!r}: {hint}"
        )


def iter_documents(path: str | os.PathLike, fmt: str) -> Iterator[str]:
    """Every document under `path` (a file or a directory, see `input_files`) read with the `fmt`
    reader.

    Path and format errors raise immediately; a corpus without any non-empty document raises
    `DataError` when the iteration ends.
    """
    reader_for(fmt)
    files = input_files(path)
    return read_documents(files, fmt, Path(path))
