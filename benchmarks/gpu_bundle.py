"""`make gpu-bundle`: what a GPU machine without network needs to run `make gpu-check`, in one
ignored folder to carry with the checkout (`.gpu-bundle/`, about 50 MB).

A GPU machine that has torch, transformers and pytest lacks kdbench's other dependencies; this
writes:
- `wheels/`: the pure-Python wheels of those, at the versions of constraints.txt, for Python 3.12
  (`--python-version`), and antlr4's runtime built from its sdist (it ships no wheel);
- `models/all-MiniLM-L6-v2/`: the teacher of the side-by-side and end-to-end parts, its weights
  stored in fp16 (half the bytes) with a float32 config, so it loads as float32 (weights change by
  at most 1e-3);
- `glue/SST-2/`: train.tsv and dev.tsv;
- `env.sh`: `. .gpu-bundle/env.sh` installs the wheels (no index, no dependencies) and sets
  KDBENCH_GLUE_DIR, KDBENCH_MODELS_DIR and the offline variables.

`python benchmarks/gpu_bundle.py [--python-version 3.12]`, with KDBENCH_GLUE_DIR and
KDBENCH_MODELS_DIR set to where SST-2 and all-MiniLM-L6-v2 are.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUNDLE = ROOT / ".gpu-bundle"
# kdbench's dependencies a GPU machine with torch and transformers may lack (all pure Python but
# xxhash, which has binary wheels for every platform pip names)
WHEELS = ("hydra-core", "omegaconf", "datasets", "dill", "multiprocess", "xxhash", "submitit")
SDISTS = ("antlr4-python3-runtime",)  # built into wheels here
MODEL = "all-MiniLM-L6-v2"
ENV = """# . .gpu-bundle/env.sh: kdbench's missing dependencies and data, offline
here="$(cd "$(dirname "${BASH_SOURCE[0]:-$0}")" && pwd)"
PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install --quiet --no-index --no-deps "$here"/wheels/*.whl
export KDBENCH_GLUE_DIR="$here/glue" KDBENCH_MODELS_DIR="$here/models"
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 WANDB_MODE=offline
"""


def pinned(name: str) -> str:
    """`name==version` as constraints.txt pins it."""
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line.split("==")[0].strip().lower() == name.lower():
            return line.strip()
    raise SystemExit(f"gpu_bundle: {name} is not pinned in constraints.txt: add it there")


def pip(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", "--quiet", *args], check=True)


def wheels(folder: Path, python_version: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    target = ("--python-version", python_version, "--only-binary=:all:")
    platform = ("--platform", "manylinux2014_x86_64", "--platform", "any")
    pip("download", "--no-deps", *target, *platform, "-d", str(folder), *map(pinned, WHEELS))
    pip("wheel", "--no-deps", "-w", str(folder), *map(pinned, SDISTS))


def half_model(source: Path, folder: Path) -> None:
    """The checkpoint with fp16 weights and a float32 config, its tokenizer files beside it."""
    import torch
    from transformers import AutoModel

    model = AutoModel.from_pretrained(source, dtype=torch.float32)
    model.half().save_pretrained(folder)
    model.config.dtype = torch.float32
    model.config.save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        if (source / name).exists():
            shutil.copy(source / name, folder / name)


def source(variable: str, inside: str) -> Path:
    path = Path(os.environ.get(variable, "")) / inside
    if not os.environ.get(variable) or not path.exists():
        raise SystemExit(f"gpu_bundle: {path} not found: set {variable} to the folder holding it")
    return path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="gpu_bundle", description=__doc__.split("\n\n")[0])
    parser.add_argument("--python-version", default="3.12", help="the GPU machine's Python")
    args = parser.parse_args(argv)
    sst2, model = source("KDBENCH_GLUE_DIR", "SST-2"), source("KDBENCH_MODELS_DIR", MODEL)
    shutil.rmtree(BUNDLE, ignore_errors=True)
    wheels(BUNDLE / "wheels", args.python_version)
    half_model(model, BUNDLE / "models" / MODEL)
    (BUNDLE / "glue" / "SST-2").mkdir(parents=True)
    for name in ("train.tsv", "dev.tsv"):
        shutil.copy(sst2 / name, BUNDLE / "glue" / "SST-2" / name)
    (BUNDLE / "env.sh").write_text(ENV)
    size = sum(f.stat().st_size for f in BUNDLE.rglob("*") if f.is_file()) / 2**20
    print(f"gpu_bundle: {BUNDLE.relative_to(ROOT)} ({size:.0f} MiB): carry it with the checkout")


if __name__ == "__main__":
    main()
