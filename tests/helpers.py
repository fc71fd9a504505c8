"""Test helpers: a tiny GLUE directory in the TSV layout, Hydra composition, the real-data
marker."""

from __future__ import annotations

import importlib.util
import os
import random
import socket
from pathlib import Path

import pytest
import torch
import yaml

from kdbench.objectives.losses import LOSSES
from kdbench.planning.hydra_config import config_dir

POSITIVE = [
    "a good movie",
    "great fun",
    "i loved it",
    "wonderful acting",
    "a fine story",
    "very nice",
]

NEGATIVE = ["a bad movie", "awful plot", "i hated it", "boring scenes", "a poor story", "very dull"]


def _rows(n: int, seed: int):
    rng = random.Random(seed)
    for i in range(n):
        label = i % 2
        words = rng.choice(POSITIVE if label else NEGATIVE)
        yield i, words + " " + rng.choice(["indeed", "really", "so", "again"]), label


def write_tiny_glue(root: Path, train: int = 48, dev: int = 16) -> Path:
    """SST-2, RTE, STS-B, MRPC and CoLA files in download_glue_data.py's layout, with a few examples
    each."""
    for split, n, seed in (("train", train, 0), ("dev", dev, 1)):
        rows = list(_rows(n, seed))
        (root / "SST-2").mkdir(parents=True, exist_ok=True)
        (root / "SST-2" / f"{split}.tsv").write_text(
            "sentence\tlabel\n" + "".join(f"{s}\t{y}\n" for _, s, y in rows)
        )
        (root / "CoLA").mkdir(exist_ok=True)
        (root / "CoLA" / f"{split}.tsv").write_text(
            "".join(f"src{i}\t{y}\t\t{s}\n" for i, s, y in rows)
        )
        (root / "RTE").mkdir(exist_ok=True)
        names = ["entailment", "not_entailment"]
        (root / "RTE" / f"{split}.tsv").write_text(
            "index\tsentence1\tsentence2\tlabel\n"
            + "".join(f"{i}\t{s}\t{s.split()[-1]} it is\t{names[y]}\n" for i, s, y in rows)
        )
        (root / "STS-B").mkdir(exist_ok=True)
        (root / "STS-B" / f"{split}.tsv").write_text(
            "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n"
            + "".join(
                f"{i}\tg\tf\t2012\t{i}\tnone\tnone\t{s}\t{s[::-1]}\t{(i % 6) * 1.0:.3f}\n"
                for i, s, _ in rows
            )
        )
        (root / "MRPC").mkdir(exist_ok=True)
        (root / "MRPC" / f"{split}.tsv").write_text(
            "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
            + "".join(f"{y}\t{i}\t{i + 1}\t{s}\t{s} too\n" for i, s, y in rows)
        )
    return root


def write_tiny_corpus(root: Path, docs: int = 60) -> Path:
    """WikiExtractor-style shards of short made-up documents (for the task-agnostic setting)."""
    rng = random.Random(0)
    words = [w for phrase in POSITIVE + NEGATIVE for w in phrase.split()]
    (root / "AA").mkdir(parents=True, exist_ok=True)
    for shard in range(2):
        blocks = []
        for i in range(docs // 2):
            doc_id = shard * 1000 + i
            lines = [
                " ".join(rng.choice(words) for _ in range(rng.randint(8, 30)))
                for _ in range(rng.randint(1, 4))
            ]
            header = f'<doc id="{doc_id}" url="x?curid={doc_id}" title="t{doc_id}">'
            blocks.append(f"{header}\nt{doc_id}\n" + "\n".join(lines) + "\n</doc>")
        (root / "AA" / f"wiki_{shard:02d}").write_text("\n".join(blocks) + "\n")
    return root


def agnostic_overrides(corpus: Path, run_dir: Path, *extra: str) -> list[str]:
    """A tiny task-agnostic distillation: tiny teacher (4x32) -> tiny student, a few steps on a
    made-up corpus."""
    return [
        "setting=task_agnostic",
        "teacher=tiny",
        "student=tiny",
        "init=random",
        f"corpus.path={corpus}",
        "corpus.seq_len=32",
        "stages.distillation.steps=6",
        "stages.distillation.batch_size=8",
        "stages.distillation.device_batch_size=4",
        "stages.distillation.eval_every=3",
        "trainer.heldout_batches=4",
        "trainer.log_every=1",
        "trainer.progress_bar=false",
        "corpus.heldout_fraction=0.2",
        f"paths.run_dir={run_dir}",
        *extra,
    ]


def released_finetune_overrides(
    student: str, glue_dir: Path, run_dir: Path, *extra: str
) -> list[str]:
    """The study's released fine-tuning of a tiny student on tiny RTE: 2 epochs of batches of 16
    (6 steps)."""
    return [
        "setting=finetune",
        "trainer=finetune_released",
        "task=rte",
        f"data.glue_dir={glue_dir}",
        f"setting.student_path={student}",
        "stages.finetune.epochs_per_task.rte=2",
        "stages.finetune.batch_size=16",
        "trainer.progress_bar=false",
        f"paths.run_dir={run_dir}",
        *extra,
    ]


def compose_config(overrides: list[str] | None = None):
    from hydra import (
        compose,
        initialize_config_dir,
    )  # here: the GPU tier runs where Hydra is not installed
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(str(config_dir()), version_base="1.3"):
        return compose("config", overrides=overrides or [])


def tiny_overrides(glue: Path, run_dir: Path, *extra: str) -> list[str]:
    """A complete tiny run: random tiny BERT teacher (4x32) to a 2x32 student on the tiny SST-2
    files."""
    return [
        "teacher=tiny",
        "student=tiny",
        "task=sst2",
        "trainer=smoke",
        "init=every_kth",
        f"data.glue_dir={glue}",
        f"paths.run_dir={run_dir}",
        *extra,
    ]


REAL_GLUE = os.environ.get("KDBENCH_GLUE_DIR")
REAL_MODELS = os.environ.get("KDBENCH_MODELS_DIR")
realdata = pytest.mark.skipif(
    not (REAL_GLUE and REAL_MODELS and Path(REAL_GLUE).is_dir() and Path(REAL_MODELS).is_dir()),
    reason="set KDBENCH_GLUE_DIR and KDBENCH_MODELS_DIR to the shared data to run real-data tests",
)


def bert_classifier(layers: int, hidden: int = 32, ffn: int = 64, heads: int = 2):
    """A random BERT sequence classifier of 100 token ids, in eval mode."""
    from transformers import BertConfig, BertForSequenceClassification

    config = BertConfig(
        vocab_size=100,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=ffn,
    )
    return BertForSequenceClassification(config).eval()


def tiny_models(cfg, num_labels: int = 2, teacher_seed: int = 0, student_seed: int = 1):
    """The config's tiny teacher (random, no fine-tuning) and a random student of its `student`
    shape."""
    from kdbench.models.pretrained import pretrained_teacher
    from kdbench.models.student import build_student
    from kdbench.planning.groups import shape_spec, teacher_spec

    teacher = pretrained_teacher(teacher_spec(cfg.teacher), num_labels, teacher_seed)
    student = build_student(
        teacher.config, shape_spec(cfg.student, "student"), num_labels, student_seed
    )
    return teacher, student


def tiny_teacher_setup(glue: Path, run_dir: Path, *extra: str):
    """A tiny run's plan, tokenizer, training set, a shuffled loader of batches of 8 and its
    fine-tuned teacher."""
    from kdbench.data.batches import make_loader
    from kdbench.data.glue import task_datasets
    from kdbench.models.pretrained import teacher_tokenizer
    from kdbench.planning.plan import make_plan
    from kdbench.records.steplog import StepLog
    from kdbench.teacher.finetune import finetuned_teacher

    plan = make_plan(compose_config(tiny_overrides(glue, run_dir, *extra)))
    tokenizer = teacher_tokenizer(plan.teacher, plan.cache_dir)
    train_set, eval_sets = task_datasets(plan.task, plan.data, tokenizer, plan.trainer.max_length)
    loader = make_loader(train_set, tokenizer, 8, shuffle=True, seed=0)
    evals = {"": make_loader(eval_sets[""], tokenizer, 8, shuffle=False)}
    teacher = finetuned_teacher(plan, loader, evals, StepLog(run_dir / "log.jsonl"))
    return plan, tokenizer, train_set, loader, teacher


def stage1_losses_and_grads(
    plan,
    student,
    teacher_model,
    train_labels,
    batches,
    feature_table=None,
    *,
    saved_bytes: bool = False,
) -> list[tuple]:
    """Per batch, one stage-1 step (from the same RNG state, no optimizer): its loss terms, the
    student's gradients, the bytes autograd saved for backward (with `saved_bytes`, else None) and
    the RNG state after it."""
    from contextlib import nullcontext

    import torch

    from kdbench.recipes.task_specific import stage_step

    results, saved = [], {}

    def keep(tensor):
        saved[tensor.untyped_storage().data_ptr()] = tensor.untyped_storage().nbytes()
        return tensor

    with stage_step(
        plan, plan.stages["intermediate"], student, teacher_model, train_labels, feature_table
    ) as (step, _):
        for batch in batches:
            student.zero_grad(set_to_none=True)
            saved.clear()
            torch.manual_seed(7)  # the same dropout masks for every variant
            with (
                torch.autograd.graph.saved_tensors_hooks(keep, lambda t: t)
                if saved_bytes
                else nullcontext()
            ):
                losses = step(batch)
            losses["total"].backward()
            results.append(
                (
                    {k: v.detach() for k, v in losses.items()},
                    {
                        n: p.grad.clone()
                        for n, p in student.named_parameters()
                        if p.grad is not None
                    },
                    sum(saved.values()) if saved_bytes else None,
                    torch.get_rng_state(),
                )
            )
    return results


def write_user_data(root: Path, train: int = 40, dev: int = 12) -> dict[str, Path]:
    """A user's own data made up in `root`: a CSV of reviews with string labels (`csv`, `csv_dev`),
    a JSONL pair task (`jsonl`: question and answer, yes/no labels, no validation file) and a CSV
    regression (`scores`)."""
    import csv
    import json

    root.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, n, seed in (("csv", train, 0), ("csv_dev", dev, 1)):
        paths[name] = root / f"reviews_{name}.csv"
        with paths[name].open("w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(["review", "sentiment", "stars"])
            writer.writerows(
                (text, "pos" if label else "neg", 4 + label) for _, text, label in _rows(n, seed)
            )
    paths["jsonl"] = root / "pairs.jsonl"
    pairs = (
        {"question": f"is {text} good?", "answer": text, "label": "yes" if label else "no"}
        for _, text, label in _rows(train, 2)
    )
    paths["jsonl"].write_text("".join(json.dumps(pair) + "\n" for pair in pairs))
    paths["scores"] = root / "scores.csv"
    paths["scores"].write_text(
        "first,second,score\n"
        + "".join(f"{text},{text[::-1]},{(i % 6) * 0.5}\n" for i, text, _ in _rows(train, 3))
    )
    return paths


def custom_overrides(run_dir: Path, *extra: str) -> list[str]:
    """A complete tiny run of task=custom (the data comes with `extra`): tiny teacher (4x32) to a
    2x32 student."""
    return [
        "task=custom",
        "teacher=tiny",
        "student=tiny",
        "trainer=smoke",
        "init=every_kth",
        f"paths.run_dir={run_dir}",
        *extra,
    ]


def verdict_reads(monkeypatch) -> list[str]:
    """A list that gets, as they happen, the stage of every read of the finite-loss verdict
    (`FiniteLoss.read`: one synchronisation each on a GPU)."""
    from kdbench.training.guard import FiniteLoss

    reads, real_read = [], FiniteLoss.read

    def read(guard, values, stage):
        reads.append(stage)
        return real_read(guard, values, stage)

    monkeypatch.setattr(FiniteLoss, "read", read)
    return reads


def assert_same_losses_and_grads(
    expected: tuple[dict, dict], actual: tuple[dict, dict], rtol: float
) -> None:
    """Two steps' (losses, gradients) by name: losses within `rtol`, gradients within 10 `rtol`
    (absolute slack scaled by the largest gradient, for entries near zero)."""
    (losses, grads), (other_losses, other_grads) = expected, actual
    assert losses.keys() == other_losses.keys() and grads.keys() == other_grads.keys()
    for name in losses:
        torch.testing.assert_close(other_losses[name], losses[name], rtol=rtol, atol=rtol / 100)
    scale = max(float(g.abs().max()) for g in grads.values())
    for name in grads:
        torch.testing.assert_close(
            other_grads[name], grads[name], rtol=10 * rtol, atol=1e-5 * scale
        )


def agnostic_objectives() -> list[str]:
    """Every packaged objective the task-agnostic setting admits (CRD needs a task's classes)."""
    names = sorted(path.stem for path in (config_dir() / "objective").glob("*.yaml"))
    return [
        name
        for name in names
        if not any(LOSSES[term["loss"]].classification_only for term in objective_terms(name))
    ]


def objective_terms(name: str) -> list[dict]:
    """The objective's task-agnostic term specs as its YAML writes them."""
    spec = yaml.safe_load((config_dir() / "objective" / f"{name}.yaml").read_text())
    return spec.get("terms_task_agnostic") or spec["terms"]


TINY_MLM_SHAPE = "augment.mlm_shape={num_layers: 1, hidden_size: 16, num_heads: 2, ffn_size: 32}"
TINY_WORD_PIECES = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "good", "great", "movie", "fun"]
TINY_WORD_PIECES += ["plot", "story", "dull"]


def write_tiny_mlm_tokenizer(folder: Path) -> Path:
    """A BERT word-piece tokenizer over a dozen tokens in `folder`, for a random augmentation MLM
    (`augment.mlm_model`, with `TINY_MLM_SHAPE`)."""
    folder.mkdir()
    (folder / "vocab.txt").write_text("\n".join(TINY_WORD_PIECES) + "\n")
    (folder / "tokenizer_config.json").write_text(
        '{"tokenizer_class": "BertTokenizer", "do_lower_case": true}'
    )
    return folder


# `python -m kdbench.bench` options of a task-agnostic run small enough for a test
TINY_BENCH = ["--teacher", "2x64", "--student", "1x64", "--length", "16", "--micro-batch", "2"]


def small_shapes(accumulation: int = 1):
    """A task-agnostic distillation of a 4x64 teacher into a 2x64 student, on micro-batches of 4
    sequences of 32 tokens: small enough for a test, every objective's features present."""
    from kdbench.measure import synthetic
    from kdbench.planning.specs import ShapeSpec

    return synthetic.Shapes(
        ShapeSpec("4x64", 4, 64, 4, 128),
        ShapeSpec("2x64", 2, 64, 4, 128),
        vocab=1200,
        length=32,
        micro_batch=4,
        accumulation=accumulation,
    )


def experiment_script(name: str):
    """The module of experiments/NAME.py, a script outside the package."""
    path = Path(__file__).parents[1] / "experiments" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def free_port() -> int:
    """A TCP port free on this machine now (a data-parallel group's rendezvous)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
