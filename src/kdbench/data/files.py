"""A user's data file read as UTF-8 text: a failure to read it is one DataError naming the file,
where, and the fix."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from kdbench.errors import DataError


@contextmanager
def reading(path: Path, fix: str) -> Iterator[None]:
    """Reads of `path` inside the block that fail (bytes that are not UTF-8, an unreadable file)
    raise a DataError naming the file and ending with `fix`."""
    try:
        yield
    except UnicodeDecodeError:
        raise not_utf8(path, fix) from None
    except OSError as exc:
        raise DataError(f"cannot read {path} ({exc.strerror or exc}): {fix}") from None


def not_utf8(path: Path, fix: str) -> DataError:
    """The error for the first byte of `path` that is not UTF-8, with its line and offset (found
    again here: a text reader's error counts from the start of its last chunk)."""
    offset = 0
    with path.open("rb") as handle:
        for number, line in enumerate(
            handle, 1
        ):  # a newline byte is never part of a multi-byte character
            try:
                line.decode("utf-8")
            except UnicodeDecodeError as exc:
                return DataError(
                    f"{path} is not UTF-8 text (line {number}, byte {line[exc.start]:#04x} at "
                    "offset "
                    f"{offset + exc.start}): {fix}"
                )
            offset += len(line)
    return DataError(f"{path} is not UTF-8 text: {fix}")
