"""Files that are written whole and checked when read.

- `atomic_write`: a temp file in the same folder, fsync, rename: a reader (or a process killed
  mid-write) never sees half a file; a full disk leaves the previous version and fails with one line
  (`DiskFullError`).
- Manifests: a cache entry or checkpoint (a file or a folder) records the size and SHA-256 of each
  of its files when it is complete (`publish`); `damage` re-reads them when it is opened. A folder's
  manifest is the file `kdbench_manifest.json` inside it, a file's the sibling
  `<name>.manifest.json`.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import secrets
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from kdbench.errors import KdbenchError, ModelNotFoundError

log = logging.getLogger("kdbench")
MANIFEST = "kdbench_manifest.json"
_CHUNK = 1 << 20


class DiskFullError(KdbenchError):
    """A write ran out of space; what was there before is unchanged."""


def human(size: float) -> str:
    if size < 1024:
        return f"{size:.0f} B"
    for unit in ("KiB", "MiB"):
        size /= 1024
        if size < 1024:
            return f"{size:.1f} {unit}"
    return f"{size / 1024:.1f} GiB"


def tensor_bytes(state) -> int:
    """The bytes of the tensors in a nested state (a state dict, an optimizer's): what saving it
    takes on disk, near enough."""
    if hasattr(state, "element_size"):
        return state.numel() * state.element_size()
    if isinstance(state, dict):
        return sum(tensor_bytes(value) for value in state.values())
    if isinstance(state, (list, tuple)):
        return sum(tensor_bytes(value) for value in state)
    return 0


def size_of(path: Path) -> int:
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return path.stat().st_size if path.exists() else 0


@contextmanager
def space_for(path: Path, need: int = 0, partial: Path | None = None) -> Iterator[None]:
    """Turns running out of space while writing `path` into a DiskFullError naming it, the space it
    needs (at least `need` bytes, or what was written of it, `partial`, when that is more) and the
    space free there; the partial file or folder is removed."""
    try:
        yield
    except OSError as exc:
        if exc.errno != errno.ENOSPC:
            raise
        written = size_of(partial) if partial is not None else 0
        if partial is not None:
            remove(partial)  # the space it took is the user's
        existing = next(p for p in (path, *path.parents) if p.exists())
        free = shutil.disk_usage(existing).free
        raise DiskFullError(
            f"no space left on the device writing {path}: it needs about "
            f"{human(max(need, written))} and "
            f"{human(free)} are free there; the previous version is unchanged: free some space (or "
            "point "
            "paths.cache_dir / the run directory at a larger disk) and re-run the same command to "
            "resume"
        ) from None


# The longest name of a file or folder, in bytes, on the file systems kdbench runs on.
NAME_MAX = 255


def folder_problem(path: Path) -> str | None:
    """Why `path` cannot be a folder this process writes into (it may not exist yet), or None when
    it can."""
    sizes = [len(os.fsencode(part)) for part in path.parts]
    if max(sizes) > NAME_MAX:
        return f"has a name of {max(sizes)} bytes, over the {NAME_MAX} a file system allows"
    existing = next(p for p in (path, *path.parents) if p.exists())
    if not existing.is_dir():
        return "is a file, not a folder" if existing == path else f"is under {existing}, a file"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"is not writable ({existing} does not let this user write)"
    return None


def atomic_write(
    path: Path, write: Callable[[IO], None], *, binary: bool = False, need: int = 0
) -> None:
    """Write through `write(handle)` to a temp file in the same folder (text in UTF-8, the mode
    that open() gives under the umask), fsync, then rename over `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    encoding = None if binary else "utf-8"
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with space_for(path, need, partial=tmp):
            with os.fdopen(fd, "wb" if binary else "w", encoding=encoding) as handle:
                write(handle)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write(path, lambda handle: handle.write(text), need=len(text.encode()))


# ------------------------------------------------------------------------------------------------
# manifests


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def manifest_of(entry: Path) -> Path:
    return entry / MANIFEST if entry.is_dir() else entry.with_name(entry.name + ".manifest.json")


def contents(entry: Path) -> dict[str, Path]:
    """The entry's files by name relative to it (a file entry: itself, named "")."""
    if not entry.is_dir():
        return {"": entry}
    return {
        p.relative_to(entry).as_posix(): p
        for p in sorted(entry.rglob("*"))
        if p.is_file() and p.name != MANIFEST
    }


def listing(entry: Path) -> dict[str, dict]:
    return {
        name: {"bytes": p.stat().st_size, "sha256": sha256_of(p)}
        for name, p in contents(entry).items()
    }


def publish(tmp: Path, entry: Path) -> None:
    """Seal the finished `tmp` (a file or folder) with its manifest and rename it to `entry`,
    replacing a file."""
    files = listing(tmp)
    if tmp.is_dir():
        atomic_write_text(tmp / MANIFEST, json.dumps(files, indent=1) + "\n")
        os.rename(tmp, entry)
    else:
        atomic_write_text(manifest_of(entry), json.dumps(files, indent=1) + "\n")
        os.replace(tmp, entry)


def damage(entry: Path) -> str | None:
    """What is wrong with an existing entry, by its manifest (None: every file has its recorded size
    and hash)."""
    manifest = manifest_of(entry)
    try:
        recorded = json.loads(manifest.read_text())
    except (OSError, ValueError):
        return (
            f"its manifest {manifest.name} is missing or unreadable "
            "(the entry was cut short or is not kdbench's)"
        )
    for name, expected in recorded.items():
        path = entry / name if name else entry
        if not path.is_file():
            return f"{path} is missing"
        if path.stat().st_size != expected["bytes"]:
            return f"{path} has {path.stat().st_size} bytes, its manifest says {expected['bytes']}"
        if sha256_of(path) != expected["sha256"]:
            return f"{path} does not match its manifest's SHA-256"
    return None


def remove(entry: Path) -> None:
    if entry.is_dir():
        shutil.rmtree(entry)
    else:
        entry.unlink(missing_ok=True)
        manifest_of(entry).unlink(missing_ok=True)


def intact(entry: Path, what: str) -> bool:
    """Whether the cache entry exists and matches its manifest; a damaged one is removed with a
    warning naming it, so the caller (holding the entry's lock) rebuilds it."""
    if not entry.exists():
        return False
    problem = damage(entry)
    if problem is None:
        return True
    log.warning("%s %s is damaged (%s): rebuilding it", what, entry, problem)
    remove(entry)
    return False


def check_saved(folder: Path, what: str) -> None:
    """A folder kdbench wrote and cannot rebuild (a saved student, a teacher given by path): when it
    carries a manifest, every file must match it; a mismatch is refused with one line naming the
    file."""
    if not (folder / MANIFEST).is_file():
        return
    problem = damage(folder)
    if problem is not None:
        raise ModelNotFoundError(
            f"{what} in {folder} is damaged: {problem}; copy it again from where it was "
            "written, or re-run the run that saved it"
        )
