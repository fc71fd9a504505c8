"""Caches and checkpoints check themselves; a full disk keeps the last good state and fails with one
line."""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from kdbench.data.corpus import build_packed_corpus
from kdbench.job import run
from kdbench.models.tiny import tiny_tokenizer
from kdbench.records.record import write_json
from kdbench.runtime import storage
from kdbench.runtime.storage import DiskFullError
from kdbench.training.checkpoint import Checkpoints
from tests.helpers import compose_config, tiny_overrides, write_tiny_corpus


def cli(*args, cache: Path):
    env = dict(os.environ, KDBENCH_CACHE=str(cache))
    return subprocess.run(
        [sys.executable, "-m", "kdbench.run", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


def flip_a_byte(path: Path) -> None:
    """Damage that keeps the size: only a checksum sees it."""
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def cut_short(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 3])


def no_space(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


def only_entry(folder: Path) -> Path:
    entries = [p for p in folder.iterdir() if not p.name.endswith((".lock", ".manifest.json"))]
    assert len(entries) == 1, entries
    return entries[0]


# ------------------------------------------------------------------------------------------------
# the manifests


@pytest.mark.parametrize("damage", [flip_a_byte, cut_short, lambda path: path.unlink()])
def test_a_published_folder_names_its_damaged_file(tmp_path, damage):
    tmp = tmp_path / "tmp"
    (tmp / "sub").mkdir(parents=True)
    (tmp / "weights.bin").write_bytes(os.urandom(4096))
    (tmp / "sub" / "meta.json").write_text("{}")
    storage.publish(tmp, tmp_path / "entry")
    assert storage.damage(tmp_path / "entry") is None and not tmp.exists()
    damage(tmp_path / "entry" / "weights.bin")
    assert "weights.bin" in storage.damage(tmp_path / "entry")


def test_a_damaged_file_entry_is_removed_with_a_warning(tmp_path, caplog):
    (tmp_path / ".x.tmp").write_bytes(b"12345678")
    storage.publish(tmp_path / ".x.tmp", tmp_path / "x.pt")
    assert storage.intact(tmp_path / "x.pt", "the entry")
    flip_a_byte(tmp_path / "x.pt")
    with caplog.at_level(logging.WARNING, logger="kdbench"):
        assert not storage.intact(tmp_path / "x.pt", "the entry")
    assert f"the entry {tmp_path / 'x.pt'} is damaged" in caplog.text and "SHA-256" in caplog.text
    assert list(tmp_path.iterdir()) == []


def test_an_entry_without_its_manifest_is_damaged(tmp_path):
    (tmp_path / "entry").mkdir()
    (tmp_path / "entry" / "a").write_text("a")
    assert "manifest" in storage.damage(tmp_path / "entry")


# ------------------------------------------------------------------------------------------------
# the caches


def test_a_teacher_cache_entry_cut_short_is_rebuilt_with_a_warning(tiny_glue, tmp_path):
    cache = tmp_path / "cache"
    args = [*tiny_overrides(tiny_glue, tmp_path / "a"), "objective=vanilla_kd"]
    first = cli(*args, cache=cache)
    assert first.returncode == 0, first.stderr[-2000:]
    entry = only_entry(cache / "teachers")
    cut_short(entry / "model.safetensors")  # an interrupted copy, a full disk
    again = cli(*[a.replace(str(tmp_path / "a"), str(tmp_path / "b")) for a in args], cache=cache)
    assert again.returncode == 0, again.stderr[-2000:]
    logged = again.stdout + again.stderr  # Hydra's log goes to stdout
    assert (
        f"the fine-tuned teacher's cache entry {entry} is damaged" in logged
        and "model.safetensors has" in logged
    )
    records = [json.loads((tmp_path / run / "result.json").read_text()) for run in ("a", "b")]
    assert records[1]["timing"]["teacher_finetune_s"] > 0  # rebuilt...
    assert records[1]["teacher_metrics"] == records[0]["teacher_metrics"]  # ...to the same teacher
    assert storage.damage(entry) is None


def test_a_damaged_teacher_logits_entry_is_rebuilt(tiny_glue, tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("KDBENCH_CACHE", str(tmp_path / "cache"))
    first = run(compose_config(tiny_overrides(tiny_glue, tmp_path / "a", "objective=vanilla_kd")))
    entry = only_entry(tmp_path / "cache" / "teacher_logits")
    flip_a_byte(entry)
    with caplog.at_level(logging.WARNING, logger="kdbench"):
        again = run(
            compose_config(tiny_overrides(tiny_glue, tmp_path / "b", "objective=vanilla_kd"))
        )
    assert f"the teacher-logits cache entry {entry} is damaged" in caplog.text
    assert again["metrics"] == first["metrics"]


def test_a_damaged_corpus_entry_is_rebuilt_to_the_same_arrays(tmp_path, caplog):
    corpus, tokenizer = write_tiny_corpus(tmp_path / "corpus"), tiny_tokenizer(tmp_path / "cache")
    built = build_packed_corpus(corpus, "wikiextractor", tokenizer, 32, tmp_path / "cache")
    expected = built.train.array.copy()
    flip_a_byte(built.path / "train.npy")
    with caplog.at_level(logging.WARNING, logger="kdbench"):
        rebuilt = build_packed_corpus(corpus, "wikiextractor", tokenizer, 32, tmp_path / "cache")
    assert f"the corpus cache entry {built.path} is damaged" in caplog.text
    assert (rebuilt.train.array == expected).all()


def test_a_checkpoint_damaged_in_place_falls_back_by_checksum(tmp_path):
    checkpoints = Checkpoints(tmp_path, keep=3)
    checkpoints.save({"step": 1, "weights": torch.ones(64)})
    flip_a_byte(
        checkpoints.save({"step": 2, "weights": torch.zeros(64)})
    )  # same size: a parse may not notice
    state, path = checkpoints.latest()
    assert state["step"] == 1 and path.name == "ckpt-00000001.pt"


# ------------------------------------------------------------------------------ what kdbench cannot
# rebuild


def test_a_teacher_given_by_path_that_is_cut_short_is_named(tiny_glue, tmp_path):
    cache = tmp_path / "cache"
    assert (
        cli(
            *tiny_overrides(tiny_glue, tmp_path / "a"), "objective=vanilla_kd", cache=cache
        ).returncode
        == 0
    )
    given = tmp_path / "teacher"
    shutil.copytree(
        only_entry(cache / "teachers"), given, ignore=shutil.ignore_patterns(storage.MANIFEST)
    )
    cut_short(given / "model.safetensors")
    result = cli(
        *tiny_overrides(tiny_glue, tmp_path / "b"),
        "objective=vanilla_kd",
        f"teacher.finetuned_path={given}",
        cache=cache,
    )
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and "Traceback" not in result.stderr, (
        result.stderr
    )
    assert f"{given / 'model.safetensors'} is damaged" in lines[0]


def test_a_saved_student_that_no_longer_matches_its_manifest_is_named(tiny_glue, tmp_path):
    cache = tmp_path / "cache"
    saved = cli(
        *tiny_overrides(tiny_glue, tmp_path / "a"),
        "objective=vanilla_kd",
        "save_student=true",
        cache=cache,
    )
    assert saved.returncode == 0, saved.stderr[-2000:]
    student = tmp_path / "a" / "student"
    assert storage.damage(student) is None
    flip_a_byte(student / "model.safetensors")
    result = cli(
        *tiny_overrides(tiny_glue, tmp_path / "b"),
        "setting=finetune",
        f"setting.student_path={student}",
        cache=cache,
    )
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and "Traceback" not in result.stderr, (
        result.stderr
    )
    assert (
        "a distilled student" in lines[0]
        and f"{student / 'model.safetensors'} does not match" in lines[0]
    )


@pytest.mark.parametrize(
    ("files", "fragment"), [({}, "model_type"), ({"config.json": "{not json"}, "not a valid JSON")]
)
def test_a_model_folder_that_holds_something_else_is_named(tiny_glue, tmp_path, files, fragment):
    folder = tmp_path / "model"
    folder.mkdir()
    for name, text in files.items():
        (folder / name).write_text(text)
    result = cli(
        *tiny_overrides(tiny_glue, tmp_path / "run"),
        "teacher=minilm_l6",
        f"teacher.name_or_path={folder}",
        "student=3x384",
        cache=tmp_path / "cache",
    )
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and "Traceback" not in result.stderr, (
        result.stderr
    )
    assert f"the model folder {folder} cannot be loaded" in lines[0] and fragment in lines[0]


# ------------------------------------------------------------------------------------------------ a
# full disk


def test_a_record_write_on_a_full_disk_keeps_the_previous_record(tmp_path, monkeypatch):
    path = tmp_path / "result.json"
    write_json(path, {"status": "running"})
    monkeypatch.setattr(
        storage.os, "fsync", no_space
    )  # where a full disk often shows: the data reaching it
    with pytest.raises(DiskFullError, match=f"writing {path}: it needs about"):
        write_json(path, {"status": "completed"})
    assert json.loads(path.read_text()) == {"status": "running"}
    assert [p.name for p in tmp_path.iterdir()] == ["result.json"]


def test_a_checkpoint_on_a_full_disk_fails_the_run_with_one_line_and_keeps_the_last_one(
    tiny_glue, tmp_path, monkeypatch
):
    saves = {"n": 0}
    real = Checkpoints.save

    def half_then_full(obj, handle, *args, **kwargs):
        handle.write(b"partial")
        no_space()

    def filling_up(checkpoints, state):  # the run's second checkpoint finds the disk full
        saves["n"] += checkpoints.folder == tmp_path / "checkpoints"
        if saves["n"] == 2:
            monkeypatch.setattr(torch, "save", half_then_full)
        return real(checkpoints, state)

    monkeypatch.setattr(Checkpoints, "save", filling_up)
    cfg = compose_config(
        tiny_overrides(
            tiny_glue,
            tmp_path,
            "objective=att_kl",
            "trainer.checkpoint_every=1",
            "trainer.keep_checkpoints=true",
        )
    )
    with pytest.raises(DiskFullError) as caught:
        run(cfg)
    message = str(caught.value)
    assert (
        "\n" not in message
        and "no space left on the device writing" in message
        and "ckpt-" in message
    )
    assert "free there" in message
    record = json.loads((tmp_path / "result.json").read_text())
    assert record["status"] == "failed" and "no space left" in record["error"]
    monkeypatch.undo()
    state, _ = Checkpoints(tmp_path / "checkpoints").latest()  # the last good one loads
    assert not list((tmp_path / "checkpoints").glob(".*tmp*"))


def test_a_teacher_cache_entry_on_a_full_disk_leaves_no_entry(tiny_glue, tmp_path, monkeypatch):
    from transformers import PreTrainedModel

    monkeypatch.setenv("KDBENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(PreTrainedModel, "save_pretrained", no_space)
    with pytest.raises(DiskFullError, match="writing .*teachers"):
        run(compose_config(tiny_overrides(tiny_glue, tmp_path / "run", "objective=vanilla_kd")))
    left = [
        p.name
        for p in (tmp_path / "cache" / "teachers").iterdir()
        if not p.name.endswith((".lock", ".checkpoints"))
    ]
    assert left == []  # neither an entry nor its half-written temp folder
