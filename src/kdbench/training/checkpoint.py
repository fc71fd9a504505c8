"""Training checkpoints: atomic writes, a manifest checked before loading, safe loading
(`weights_only=True`).

A checkpoint holds everything needed to continue a stage exactly: the trained modules' state, the
optimizer, the scheduler, the torch RNG states and the data position (epoch, batch within the
epoch).
"""

from __future__ import annotations

import logging
import re
import shutil
from pathlib import Path

import torch

from kdbench.runtime import storage

log = logging.getLogger(__name__)
_NAME = re.compile(r"^ckpt-(\d{8})\.pt$")


class Checkpoints:
    """The checkpoints of one run, newest last; keeps the `keep` most recent."""

    def __init__(self, folder: Path, keep: int = 2, meta: dict | None = None):
        self.folder = Path(folder)
        self.keep = keep
        self.meta = dict(meta or {})  # stored in every checkpoint (e.g. the config fingerprint)

    def _existing(self) -> list[Path]:
        if not self.folder.is_dir():
            return []
        return sorted(p for p in self.folder.iterdir() if _NAME.match(p.name))

    def save(self, state: dict) -> Path:
        """Write atomically with its manifest (temp file, fsync, rename), then drop the oldest
        beyond `keep`."""
        self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        existing = self._existing()
        number = int(_NAME.match(existing[-1].name).group(1)) + 1 if existing else 1
        path = self.folder / f"ckpt-{number:08d}.pt"
        tmp = path.with_name(f".{path.name}.tmp")
        storage.atomic_write(
            tmp,
            lambda handle: torch.save(self.meta | state, handle),
            binary=True,
            need=storage.tensor_bytes(state),
        )
        storage.publish(tmp, path)
        for old in self._existing()[: -self.keep]:
            storage.remove(old)
        return path

    def latest(self) -> tuple[dict, Path] | None:
        """The newest checkpoint that matches its manifest; a damaged one (torn, truncated, no
        manifest) is reported and skipped."""
        for path in reversed(self._existing()):
            problem = storage.damage(path)
            if problem is None:
                return torch.load(path, map_location="cpu", weights_only=True), path
            log.warning("checkpoint %s is damaged (%s); using the previous one", path, problem)
        return None

    def clear(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


def rng_state(device: torch.device) -> dict:
    """The torch RNG streams a process draws from: the CPU's and, on a GPU, its own device's."""
    state = {"torch": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def set_rng_state(state: dict, device: torch.device) -> None:
    """Restore `rng_state`'s streams; the saved GPU stream goes to this process's device
    (data-parallel processes draw the same stream: one seed, the same shapes)."""
    torch.set_rng_state(state["torch"])
    if "cuda" in state and device.type == "cuda":
        torch.cuda.set_rng_state(state["cuda"], device)
