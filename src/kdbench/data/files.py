"""A user's data file read as UTF-8 text: a failure to read it is one DataError naming the file,
where, and the fix; a CSV file's delimiter; the data files of a folder in the Hub's layout."""

from __future__ import annotations

import csv
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


DELIMITERS = ",;\t|"  # the delimiters a CSV file's is found among
SNIFFED_CHARS = 1024
TAB = "\\t"  # how an override writes a tab: task.delimiter='\t'


def csv_delimiter(path: Path, given: str | None) -> str:
    """The delimiter of the CSV file `path`: `given` (task.delimiter), else a tab for a .tsv, else
    the one of DELIMITERS that csv.Sniffer finds in its first KB (a comma where it finds none)."""
    if given:
        return "\t" if given == TAB else given
    if path.suffix.lower() == ".tsv":
        return "\t"
    with reading(path, "re-encode the file as UTF-8"), path.open(encoding="utf-8-sig") as handle:
        sample = handle.read(SNIFFED_CHARS)
    whole_lines = sample[: sample.rfind("\n") + 1] or sample  # a cut last line misleads it
    try:
        return csv.Sniffer().sniff(whole_lines, delimiters=DELIMITERS).delimiter
    except csv.Error:
        return ","


def no_rows(path: Path) -> bool:
    """Whether a text file holds a header at most (a Parquet file is never read here)."""
    if path.suffix.lower() == ".parquet":
        return False
    with path.open("rb") as handle:
        lines = (line for line in handle if line.strip())
        if next(lines, None) is None:
            return True
        return path.suffix.lower() in (".csv", ".tsv") and next(lines, None) is None


def check_utf8(path: Path, fix: str) -> None:
    """`path` reads as UTF-8 text, else a DataError naming its first byte that does not
    (`not_utf8`), ending with `fix`."""
    with reading(path, fix), path.open(encoding="utf-8-sig") as handle:
        while handle.read(1 << 20):
            pass


def folder_files(folder: Path, suffixes) -> dict[str, Path] | None:
    """The data file of each split of `folder`, a folder in the Hub's layout (`train.csv`,
    `dev.csv`, ... found by `datasets`' rules), where each split is one file with a suffix in
    `suffixes`; None for anything else (no folder, no data file, a split in several files)."""
    # imported here: the plan reads this module's names before any data library loads
    from datasets.data_files import DataFilesList, EmptyDatasetError, get_data_patterns

    try:
        patterns = get_data_patterns(str(folder)) if folder.is_dir() else {}
    except EmptyDatasetError:
        return None
    found = {
        str(split): list(DataFilesList.from_patterns(split_patterns, base_path=str(folder)))
        for split, split_patterns in patterns.items()
    }
    if not found or any(len(paths) != 1 for paths in found.values()):
        return None
    files = {split: Path(paths[0]) for split, paths in found.items()}
    return files if all(path.suffix.lower() in suffixes for path in files.values()) else None
