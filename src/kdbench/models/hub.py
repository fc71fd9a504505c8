"""Finding and loading a model, config or tokenizer: a local directory, a folder under
$KDBENCH_MODELS_DIR, or the Hugging Face Hub; and checking a folder kdbench saved before it is used.

A model is looked for, in order: a local directory given as `name_or_path`; a folder named like the
model under $KDBENCH_MODELS_DIR (`sentence-transformers/all-MiniLM-L6-v2` ->
`$KDBENCH_MODELS_DIR/all-MiniLM-L6-v2`); the Hugging Face Hub. Remote code is never executed.
A cache key names a model as `model_identity` does.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import sys
from contextlib import contextmanager
from pathlib import Path

from safetensors import SafetensorError, safe_open
from transformers import AutoConfig, PretrainedConfig
from transformers.utils import logging as transformers_logging

from kdbench.errors import KdbenchError, ModelNotFoundError
from kdbench.models.anatomy import MLM_HEADS, TASK_HEADS
from kdbench.runtime import storage

MODELS_DIR_ENV = "KDBENCH_MODELS_DIR"
LOAD_REPORT = "LOAD REPORT"  # the title of transformers' table of missing and unexpected weights
HEADS = {  # anatomy's heads, as a sentence names them
    "classifier": "classifier head",
    "pooler": "pooler",
    "cls": "MLM head",
    "lm_head": "MLM head",
}


def resolve_model_path(name_or_path: str) -> str:
    """A local directory for the model if there is one, else the Hub id unchanged."""
    if Path(name_or_path).expanduser().is_dir():
        return str(Path(name_or_path).expanduser())
    models_dir = os.environ.get(MODELS_DIR_ENV)
    if models_dir:
        candidate = Path(models_dir) / name_or_path.rstrip("/").split("/")[-1]
        if candidate.is_dir():
            return str(candidate)
    return name_or_path


def model_identity(name_or_path: str) -> str:
    """How a cache key names a model: a local directory by its files' content (`folder_digest`),
    wherever it lies, so a folder written again in place names new weights; a Hub id, read from the
    Hub or its copy under $KDBENCH_MODELS_DIR, by the id itself."""
    folder = Path(name_or_path).expanduser()
    return f"sha256:{folder_digest(folder)}" if folder.is_dir() else name_or_path


def folder_digest(folder: Path) -> str:
    """The SHA-256 of a model folder's files (its top level, as `from_pretrained` reads it): each
    one's name and SHA-256, every byte read once; kdbench's manifest (a summary of them) left
    out. Read once per process while the files stay as they were (`_files_digest`)."""
    files = sorted(
        path for path in folder.iterdir() if path.is_file() and path.name != storage.MANIFEST
    )
    return files_digest(files)


def files_digest(files: list[Path]) -> str:
    """The SHA-256 of files' names and SHA-256s, read once per process while they stay as they
    were (`_files_digest`)."""
    return _files_digest(tuple((path, _written(path)) for path in files))


def _written(path: Path) -> tuple[int, ...]:
    """What changes whenever a file is written: its inode, size, modification and change times."""
    stat = path.stat()
    return stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns


@functools.cache
def _files_digest(files: tuple[tuple[Path, tuple[int, ...]], ...]) -> str:
    digests = {path.name: storage.sha256_of(path) for path, _ in files}
    return hashlib.sha256(json.dumps(digests, sort_keys=True).encode()).hexdigest()


def _not_found(name_or_path: str, exc: Exception) -> ModelNotFoundError:
    folder = name_or_path.rstrip("/").split("/")[-1]
    where = os.environ.get(MODELS_DIR_ENV)
    looked = (
        f"${MODELS_DIR_ENV}/{folder} ({where}/{folder})" if where else f"${MODELS_DIR_ENV} (unset)"
    )
    return ModelNotFoundError(
        f"model {name_or_path!r} not found: looked for a local directory, {looked} and the "
        f"Hugging Face Hub ({type(exc).__name__}); offline, download it once and point "
        f"${MODELS_DIR_ENV} at the folder that holds {folder}/, or set the path directly "
        f"(teacher.name_or_path=/path/to/{folder})"
    )


def load(auto, name_or_path: str | Path, *, saved_as: str | None = None, **kwargs):
    """`auto.from_pretrained` (a model, config or tokenizer class) from a local copy if there is
    one, else the Hub; remote code never runs. A failure is one line: where it looked, or, for a
    folder kdbench wrote (`saved_as` names what it should hold), which file is damaged or what to
    give instead."""
    path = str(name_or_path) if saved_as else resolve_model_path(str(name_or_path))
    try:
        return auto.from_pretrained(path, trust_remote_code=False, **kwargs)
    except (OSError, ValueError, SafetensorError) as exc:
        if Path(path).is_dir():
            check_saved_model(Path(path), str(name_or_path))
        if saved_as:
            raise ModelNotFoundError(
                f"cannot load {saved_as} from {path} ({type(exc).__name__}): give a directory "
                "written by save_pretrained with the task's number of labels"
            ) from exc
        if Path(path).is_dir():
            raise ModelNotFoundError(
                f"the model folder {path} cannot be loaded ({type(exc).__name__}: {reason(exc)}): "
                "give a folder written by save_pretrained (config.json, the weights, the "
                "tokenizer's files) or a Hub id"
            ) from exc
        raise _not_found(str(name_or_path), exc) from exc


def load_model(auto, name_or_path: str | Path, *, owner: str, **kwargs):
    """`load` for a model (`owner` names it: "the teacher"), where the heads kdbench chooses decide
    what is loaded: a head the checkpoint lacks starts fresh and a head the model lacks is left out.
    One kdbench line says which head starts fresh, in place of transformers' load report; a weight
    missing or unexpected elsewhere, or of the wrong shape, shows transformers' report."""
    with held_load_reports() as held:
        model, info = load(auto, name_or_path, output_loading_info=True, **kwargs)
    outside = [key for key in (*info["missing_keys"], *info["unexpected_keys"]) if not head(key)]
    if outside or info["mismatched_keys"]:
        show_reports(held)
    elif info["missing_keys"]:
        checkpoint = Path(str(name_or_path).rstrip("/")).name
        line = fresh_heads_line(owner, info["missing_keys"], model.config, checkpoint)
        print(line, file=sys.stderr)
    return model


def fresh_heads_line(owner: str, missing_keys, config: PretrainedConfig, checkpoint: str) -> str:
    """kdbench: the teacher's classifier head (2 labels) starts fresh: <checkpoint> has none."""
    labels = "one score" if config.num_labels == 1 else f"{config.num_labels} labels"
    names = {
        HEADS[name] + (f" ({labels})" if name == "classifier" else "")
        for name in map(head, missing_keys)
    }
    verb = "starts" if len(names) == 1 else "start"
    return f"kdbench: {owner}'s {' and '.join(sorted(names))} {verb} fresh: {checkpoint} has none"


def head(key: str) -> str | None:
    """The head (of anatomy's MLM_HEADS and TASK_HEADS) a weight's name places it in, if any."""
    return next((part for part in key.split(".") if part in (*MLM_HEADS, *TASK_HEADS)), None)


def model_logger() -> logging.Logger:
    return transformers_logging.get_logger("transformers.modeling_utils")


def show_reports(held: list[logging.LogRecord]) -> None:
    for report in held:
        model_logger().handle(report)


@contextmanager
def held_load_reports():
    """The load reports transformers logs meanwhile, held back (a list) rather than shown, unless
    the load fails other than on bad input (whose one-line error says what to give); its other
    messages pass."""
    held: list[logging.LogRecord] = []

    def hold(record: logging.LogRecord) -> bool:
        if LOAD_REPORT in record.getMessage():
            held.append(record)
            return False
        return True

    model_logger().addFilter(hold)
    try:
        yield held
    except KdbenchError:
        model_logger().removeFilter(hold)
        raise
    except BaseException:
        model_logger().removeFilter(hold)
        show_reports(held)  # a failed load keeps transformers' account of its weights
        raise
    model_logger().removeFilter(hold)


def reason(exc: Exception, limit: int = 160) -> str:
    """The first line of an exception's message, shortened: enough to say what was wrong in one
    line."""
    first = next((line.strip() for line in str(exc).splitlines() if line.strip()), "")
    return first if len(first) <= limit else first[: limit - 3] + "..."


def check_saved_model(folder: Path, what: str) -> None:
    """A model folder that cannot be rebuilt, checked cheaply before use: against its manifest when
    kdbench wrote it, and every safetensors file's header; a damaged file is refused with one line
    naming it."""
    storage.check_saved(folder, what)
    for weights in sorted(folder.glob("*.safetensors")):
        try:
            with safe_open(str(weights), framework="pt"):
                pass
        except (OSError, SafetensorError) as exc:
            raise ModelNotFoundError(
                f"cannot load {what}: {weights} is damaged ({type(exc).__name__}, cut short or "
                "overwritten); copy or save it again"
            ) from None


def saved_config(folder: Path, what: str) -> PretrainedConfig:
    """The config of a saved model that cannot be rebuilt, after checking its files
    (`check_saved_model`)."""
    check_saved_model(folder, what)
    return load(AutoConfig, folder, saved_as=what)
