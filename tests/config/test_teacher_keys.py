"""What the teacher's cache keys name: the dev subset that scores a fine-tuned teacher, the data
source of both the teacher and the tables computed from it (a given teacher's too), TF32 where it
runs, and a local teacher folder by its content."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace

import torch
from transformers import AutoTokenizer, BertConfig, BertForMaskedLM

from kdbench.models.tiny import tiny_tokenizer
from kdbench.planning.plan import make_plan
from kdbench.runtime import storage
from kdbench.teacher.cache import cache_path, derived_key, teacher_identity, teacher_key
from tests.helpers import compose_config, tiny_overrides, write_tiny_glue

HUB = ["teacher=tiny", "student=tiny", "task=sst2", "trainer=smoke", "objective=vanilla_kd"]


def test_the_teachers_key_names_its_dev_subset_only_where_one_is_set(tiny_glue, tmp_path):
    def key(*extra):
        return teacher_key(make_plan(compose_config(tiny_overrides(tiny_glue, tmp_path, *extra))))

    whole, part = key(), key("data.eval_limit=4")
    assert "eval_limit" not in whole["data"]
    assert part == whole | {"data": whole["data"] | {"eval_limit": 4}}


def test_the_teachers_keys_name_the_hub_dataset_its_examples_come_from(tmp_path, monkeypatch):
    monkeypatch.delenv("KDBENCH_GLUE_DIR", raising=False)
    for hub in ("nyu-mll/glue", "someone/sst2-relabelled"):
        run_dir = f"paths.run_dir={tmp_path / 'run'}"
        plan = make_plan(compose_config([*HUB, run_dir, f"data.hf_dataset={hub}"]))
        assert teacher_key(plan)["data"]["source"] == hub
        assert derived_key("a given teacher", range(3), None, plan)["source"] == hub


def test_the_teachers_keys_name_tf32_only_where_its_matmuls_run(tiny_glue, tmp_path):
    """An fp32 run on a GPU with TF32 (`plan.tf32`, resolved for the device) and one with
    `trainer.tf32=false` fine-tune and read different teachers; off a GPU nothing changes."""
    plan = make_plan(compose_config(tiny_overrides(tiny_glue, tmp_path)))
    assert not plan.tf32  # the CPU: no TF32, and keys as before
    with_tf32 = replace(plan, tf32=True)
    assert teacher_key(with_tf32) == teacher_key(plan) | {
        "recipe": teacher_key(plan)["recipe"] | {"tf32": True}
    }
    assert cache_path(with_tf32) != cache_path(plan)
    tables = derived_key("a teacher", range(3), None, plan)
    assert derived_key("a teacher", range(3), None, with_tf32) == tables | {"tf32": True}


def test_the_teachers_key_names_weight_decay_on_only_where_it_is_not_matrices(tiny_glue, tmp_path):
    def key(*extra):
        return teacher_key(make_plan(compose_config(tiny_overrides(tiny_glue, tmp_path, *extra))))

    optimizer = key()["recipe"]["stage"]["optimizer"]
    every = key("stages.teacher.optimizer.weight_decay_on=every")["recipe"]["stage"]["optimizer"]
    assert "weight_decay_on" not in optimizer and every == optimizer | {"weight_decay_on": "every"}


def save_teacher(folder, seed: int, tokenizer) -> None:
    """A random 4x32 BERT with an MLM head and the tiny tokenizer, saved as a distilled teacher."""
    torch.manual_seed(seed)
    shape = dict(hidden_size=32, num_hidden_layers=4, num_attention_heads=4, intermediate_size=64)
    BertForMaskedLM(BertConfig(vocab_size=len(tokenizer), **shape)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def test_a_local_teachers_keys_name_its_content_wherever_it_lies(tiny_glue, tmp_path):
    """A folder distilled again in place is a new teacher (no entry of the old weights is read); a
    copy elsewhere is the same one."""
    tokenizer, folder, copy = tiny_tokenizer(tmp_path / "tok"), tmp_path / "a", tmp_path / "b"

    def plan(path, run):
        local = ["teacher=distilled", f"teacher.name_or_path={path}"]
        return make_plan(compose_config(tiny_overrides(tiny_glue, tmp_path / run, *local)))

    save_teacher(folder, 0, tokenizer)
    first = cache_path(plan(folder, "first"))
    shutil.copytree(folder, copy)
    save_teacher(folder, 1, tokenizer)
    again = plan(folder, "again")
    assert cache_path(again) != first
    assert teacher_key(again)["teacher"]["name_or_path"].startswith("sha256:")
    assert cache_path(plan(copy, "copy")) == first


def test_a_local_teachers_files_are_read_once_per_process_while_unchanged(
    tiny_glue, tmp_path, monkeypatch
):
    """Every key of a run (and of a sweep's runs in one process) names the folder by one read of
    its files; a file written again is read again."""
    tokenizer, folder = tiny_tokenizer(tmp_path / "tok"), tmp_path / "teacher"
    save_teacher(folder, 0, tokenizer)
    local = ["teacher=distilled", f"teacher.name_or_path={folder}"]
    plan = make_plan(compose_config(tiny_overrides(tiny_glue, tmp_path / "run", *local)))
    read = []
    sha256_of = storage.sha256_of
    monkeypatch.setattr(storage, "sha256_of", lambda path: read.append(path) or sha256_of(path))
    first = [cache_path(plan), teacher_key(plan), cache_path(plan)][0]
    files = sorted(p for p in folder.iterdir() if p.is_file())
    assert sorted(read) == files
    save_teacher(folder, 1, tokenizer)
    assert cache_path(plan) != first and len(read) == 2 * len(files)


def test_a_hub_teachers_key_names_its_id_also_when_read_from_the_models_dir(tmp_path, monkeypatch):
    (tmp_path / "bert-base-uncased").mkdir()
    monkeypatch.setenv("KDBENCH_MODELS_DIR", str(tmp_path))
    group = {"name": "bert_base_uncased", "name_or_path": "bert-base-uncased", "shape": None}
    assert teacher_identity(group) == group
    assert teacher_identity(group | {"name_or_path": None}) == group | {"name_or_path": None}


def test_the_teachers_keys_name_the_glue_files_content_and_how_they_are_read(tmp_path):
    """A GLUE file written again in place, or its labels read in another order, gives a new
    teacher and new tables; another run folder or student seed reuses them."""
    glue = write_tiny_glue(tmp_path / "glue")

    def keys(*extra, run="a"):
        plan = make_plan(compose_config(tiny_overrides(glue, tmp_path / run, *extra)))
        return teacher_key(plan), derived_key("a teacher", range(3), None, plan)

    before = keys()
    assert keys(run="b") == before and keys("seed=7") == before
    rte = keys("task=rte")
    assert all_new(keys("task=rte", "task.labels=[not_entailment,entailment]"), rte)
    train = glue / "SST-2" / "train.tsv"
    header, first, *rest = train.read_text().splitlines()
    text, label = first.rsplit("\t", 1)
    train.write_text("\n".join([header, f"{text}\t{1 - int(label)}", *rest]) + "\n")
    assert all_new(keys(), before)


def test_the_tables_keys_name_a_local_tokenizer_by_its_content(tiny_glue, tmp_path):
    """A given teacher's tokenizer folder written again in place (here: truncating from the left)
    tokenises the examples otherwise: its tables are new ones."""
    plan = make_plan(compose_config(tiny_overrides(tiny_glue, tmp_path / "run")))
    folder = tmp_path / "tokenizer"
    tiny_tokenizer(tmp_path / "cache").save_pretrained(folder)
    before = derived_key("a given teacher", range(3), AutoTokenizer.from_pretrained(folder), plan)
    settings = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(
        json.dumps(settings | {"truncation_side": "left"})
    )
    after = derived_key("a given teacher", range(3), AutoTokenizer.from_pretrained(folder), plan)
    assert after["tokenizer"] != before["tokenizer"]


def all_new(keys: tuple, old: tuple) -> bool:
    return all(key != was for key, was in zip(keys, old, strict=True))
