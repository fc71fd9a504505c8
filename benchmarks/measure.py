"""One measurement, in its own process: `python benchmarks/measure.py '<json spec>'` prints one JSON
line.

spec: impl (kdbench | tuned | plain | textbrewer | textbrewer_dynamic | check: kdbench's loss and
gradients against the plain and tuned loops'), objective (att_kl+val_kl | hid_seq | vanilla_kd:
stage 2), task (sst2 | rte | wiki: Wikipedia text packed to exactly seq_len tokens), seq_len,
student_layers, batch_size, steps (timed), warmup, seed; precision (fp32 | bf16: kdbench, and the
tuned loop under bf16 autocast; the others fp32 only); kdbench only: features (stage 1 reads the
teacher's features from kdbench's table, built untimed before the steps, as a run does once per
study; otherwise the teacher runs every step: equal work), overrides (Hydra
overrides: kdbench's optional trainer settings, e.g. trainer.recompute_losses=true,
trainer.recompute_attention=true, trainer.compile=true); optional: teacher and student (config
options, default minilm_l6 and 3x384), init (every_kth or random), threads.

Every implementation's float32 matrix products run as a kdbench run's do (`trainer.tf32`: in TF32
on a GPU that has it, in an fp32 run; `tf32` in the line says which). Every implementation gets the
same teacher and student weights and the same examples: `warmup`
untimed batches, then `steps` timed batches that cover the same `steps * batch_size` examples
(kdbench, the tuned loop and textbrewer_dynamic: kdbench's length-grouped batches with dynamic
padding; plain and textbrewer: every batch padded to seq_len, in a seeded random order), then one
untimed batch (TextBrewer saves the student after its last step). The clock starts when the first
timed batch is fetched and stops when the batch after the last timed one is, so a step is the full
loop iteration (forward, backward, optimizer step, the framework's own overhead). Peak memory: the
process's resident-set high-water mark over the timed steps (Linux VmHWM, reset through
/proc/self/clear_refs when they begin; the allocator keeps what the warm-up steps took, so it is the
training peak), or the CUDA allocator's peak on a GPU.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import torch
from datasets import Dataset
from transformers import DataCollatorWithPadding

sys.path.insert(0, str(Path(__file__).resolve().parent))

import peers  # noqa: E402

from kdbench.data.batches import make_loader  # noqa: E402
from kdbench.data.glue import task_datasets  # noqa: E402
from kdbench.data.packed import pack_tokens  # noqa: E402
from kdbench.data.readers import iter_documents  # noqa: E402
from kdbench.measure.timing import TimedBatches, optimizer_for, train_steps  # noqa: E402
from kdbench.models.attention import prepare_for_training  # noqa: E402
from kdbench.models.compilation import compile_blocks  # noqa: E402
from kdbench.models.layers import every_kth  # noqa: E402
from kdbench.models.pretrained import pretrained_teacher, teacher_tokenizer  # noqa: E402
from kdbench.models.student import build_student, init_from_teacher  # noqa: E402
from kdbench.planning.hydra_config import compose  # noqa: E402
from kdbench.planning.plan import make_plan  # noqa: E402
from kdbench.recipes.task_specific import stage_step  # noqa: E402
from kdbench.runtime.precision import apply_matmul_precision  # noqa: E402
from kdbench.teacher.features import compute_table  # noqa: E402
from kdbench.teacher.frozen import freeze, in_run_precision  # noqa: E402
from kdbench.teacher.logits import LogitsRows  # noqa: E402
from kdbench.training.evaluate import logits_table  # noqa: E402
from kdbench.training.steps import to_device  # noqa: E402

TOKEN_INPUTS = peers.TOKEN_INPUTS


def wiki_rows(tokenizer, seq_len: int, n: int) -> Dataset:
    """n sequences of exactly seq_len tokens ([CLS] text [SEP]) from the Wikipedia sample: no
    padding anywhere."""
    ids = []
    for doc in iter_documents(os.environ["KDBENCH_CORPUS"], "wikiextractor"):
        ids.extend(tokenizer(doc, add_special_tokens=False)["input_ids"])
        if len(ids) > n * seq_len:
            break
    rows, _ = pack_tokens(
        torch.tensor(ids).numpy(),
        seq_len,
        tokenizer.cls_token_id,
        tokenizer.sep_token_id,
        tokenizer.pad_token_id,
    )
    rows = rows[:n]  # all full: more than n rows' worth of tokens were read
    ds = Dataset.from_dict(
        {
            "input_ids": rows.tolist(),
            "attention_mask": [[1] * seq_len] * len(rows),
            "token_type_ids": [[0] * seq_len] * len(rows),
            "labels": [0] * len(rows),
            "example": list(range(len(rows))),
            "length": [seq_len] * len(rows),
        }
    )
    ds.set_format("torch")
    return ds


class Setup:
    """The config, data, teacher and student every implementation shares."""

    def __init__(self, spec: dict):
        self.spec = spec
        torch.manual_seed(spec["seed"])
        k, batch = spec["student_layers"], spec["batch_size"]
        n = (spec["warmup"] + spec["steps"] + 1) * batch
        overrides = [
            f"task={'sst2' if spec['task'] == 'wiki' else spec['task']}",
            f"teacher={spec.get('teacher', 'minilm_l6')}",
            f"student={spec.get('student', '3x384')}",
            f"student.num_layers={k}",
            f"init={spec.get('init', 'every_kth')}",
            f"objective={spec['objective']}",
            f"trainer.max_length={spec['seq_len']}",
            f"stages.intermediate.batch_size={batch}",
            f"stages.prediction.batch_size={batch}",
            f"data.train_limit={n}",
            f"trainer.precision={spec.get('precision', 'fp32')}",
            "stages.teacher.epochs=0",
            f"seed={spec['seed']}",
            *spec.get("overrides", []),
        ]
        self.cfg = cfg = compose(overrides)
        self.plan = plan = make_plan(cfg)
        apply_matmul_precision(plan.device, plan.tf32)  # every implementation's, as a run's
        self.device = plan.device
        # (student, teacher) layers, 1-based: the init layers, or TinyBERT's uniform map for a
        # random student
        mapped = plan.init.layers or every_kth(plan.teacher_conf.num_hidden_layers, k)
        self.pairs = list(zip(range(1, k + 1), mapped))
        self.tokenizer = teacher_tokenizer(plan.teacher, plan.cache_dir)
        if spec["task"] == "wiki":
            self.train = wiki_rows(self.tokenizer, spec["seq_len"], n)
        else:
            self.train = task_datasets(
                plan.task, plan.data, self.tokenizer, plan.trainer.max_length
            )[0]
        self.teacher = freeze(pretrained_teacher(plan.teacher, plan.num_labels, spec["seed"])).to(
            self.device
        )
        self.student = build_student(plan.teacher_conf, plan.student, plan.num_labels, spec["seed"])
        if plan.init.layers:
            init_from_teacher(self.student, self.teacher, plan.init)
        self.student.to(self.device).train()
        # the example sets: timed ones first, then warm-up and tail
        timed = batch * spec["steps"]
        self.timed_set = self.train.select(range(timed))
        self.other_set = self.train.select(range(timed, len(self.train)))

    def batches(self, dataset, *, padded: bool, tokens_only: bool = False) -> list[dict]:
        keep = TOKEN_INPUTS + (() if tokens_only else ("labels", "example"))
        if padded:  # plain and textbrewer: every batch padded to seq_len, random order
            collate = DataCollatorWithPadding(
                self.tokenizer, padding="max_length", max_length=self.spec["seq_len"]
            )
            loader = torch.utils.data.DataLoader(
                dataset,
                batch_size=self.spec["batch_size"],
                shuffle=True,
                collate_fn=collate,
                generator=torch.Generator().manual_seed(0),
            )
        else:  # kdbench's batches: length-grouped, dynamic padding
            loader = make_loader(
                dataset,
                self.tokenizer,
                self.spec["batch_size"],
                shuffle=True,
                seed=self.spec["seed"],
                group_by_length=True,
            )
        return [to_device({k: v for k, v in b.items() if k in keep}, self.device) for b in loader]

    def timed_batches(self, *, padded: bool, tokens_only: bool = False) -> TimedBatches:
        other = self.batches(self.other_set, padded=padded, tokens_only=tokens_only)
        timed = self.batches(self.timed_set, padded=padded, tokens_only=tokens_only)
        return TimedBatches(other[: self.spec["warmup"]], timed, other[-1:], self.device)


def run_kdbench(setup: Setup) -> TimedBatches:
    batches = setup.timed_batches(padded=False)
    plan = setup.plan
    prepare_for_training(setup.student, plan.trainer.recompute_attention)
    if (
        plan.trainer.compile
    ):  # compiled during the warm-up steps (their time is reported as warmup_s)
        compile_blocks(setup.student, setup.teacher)
    in_run_precision(setup.teacher, plan.precision)  # bf16 weights in a bf16 run, as a run keeps it
    if plan.terms:
        stage = plan.stages["intermediate"]
        features = cached_features(setup) if setup.spec.get("features") else None
    # stage 2 from the teacher's cached logits (computed once per teacher and task, as in a sweep)
    else:
        stage = plan.stages["prediction"]
        loader = make_loader(
            setup.train, setup.tokenizer, plan.trainer.eval_batch_size, shuffle=False
        )
        table = logits_table(
            setup.teacher, loader, len(setup.train), plan.num_labels, setup.device, plan.precision
        )
        rows = LogitsRows(table.to(setup.device))
        features = lambda needs, stop_after, logits: rows  # noqa: E731
    labels = setup.train["labels"]
    with stage_step(plan, stage, setup.student, setup.teacher, labels, features) as (step, modules):
        train_steps(step, modules, batches)
    return batches


def cached_features(setup: Setup):
    """kdbench's teacher-features table of the training examples, built when stage 1 asks for it
    (untimed: once per study in a run; its seconds go to `setup.features_build_s`)."""

    def table(needs, stop_after, logits):
        start = time.perf_counter()
        built = compute_table(
            setup.teacher, setup.train, setup.tokenizer, setup.plan, needs, stop_after, logits
        )
        setup.features_build_s = time.perf_counter() - start
        return built

    return table


def peer_batches(
    setup: Setup, *, padded: bool = True, eager: bool = True
) -> tuple[bool, TimedBatches]:
    """(stage 1?, the batches) for a peer: eager attention where it reads attention maps from the
    outputs."""
    stage1 = bool(setup.plan.terms)
    for model in (setup.teacher, setup.student):
        model.set_attn_implementation("eager" if stage1 and eager else "sdpa")
    return stage1, setup.timed_batches(
        padded=padded, tokens_only=stage1
    )  # a peer's stage 1 has no label term


def run_plain(setup: Setup) -> TimedBatches:
    stage1, batches = peer_batches(setup)
    step, modules = (peers.plain_stage1 if stage1 else peers.plain_stage2)(setup)
    train_steps(step, modules, batches)
    return batches


def run_tuned(setup: Setup) -> TimedBatches:
    stage1, batches = peer_batches(setup, padded=False, eager=False)
    step, modules = (peers.tuned_stage1 if stage1 else peers.tuned_stage2)(setup)
    train_steps(under_autocast(step, setup), modules, batches)
    return batches


def under_autocast(step, setup: Setup):
    """A peer's step as a careful user runs it in bf16: all of it under bf16 autocast."""
    if setup.plan.precision != "bf16":
        return step

    def bf16_step(batch):
        with torch.autocast(setup.device.type, dtype=torch.bfloat16):
            return step(batch)

    return bf16_step


def run_textbrewer(setup: Setup, padded: bool = True) -> TimedBatches:
    _, batches = peer_batches(setup, padded=padded)
    peers.textbrewer_train(setup, batches, optimizer_for, num_steps=len(batches))
    return batches


def student_grads(student, loss) -> dict[str, torch.Tensor]:
    student.zero_grad(set_to_none=True)
    loss.backward()
    return {name: p.grad.clone() for name, p in student.named_parameters() if p.grad is not None}


def check(setup: Setup) -> dict:
    """kdbench's stage-1 loss and student gradients against the plain and tuned loops', same padded
    batch, same weights."""
    setup.student.eval()  # no dropout: every implementation must see the same student
    batch = setup.batches(setup.timed_set, padded=True)[0]
    plan = setup.plan
    stage = plan.stages["intermediate"]
    with stage_step(plan, stage, setup.student, setup.teacher, setup.train["labels"]) as (step, _):
        ours = step(batch)["total"]
        our_grads = student_grads(setup.student, ours)
    result = {"kdbench_loss": ours.item()}
    for peer, make_step, attention in (
        ("plain", peers.plain_stage1, "eager"),
        ("tuned", peers.tuned_stage1, "sdpa"),
    ):
        for model in (setup.teacher, setup.student):
            model.set_attn_implementation(attention)
        step, _ = make_step(setup)
        theirs = step({k: v for k, v in batch.items() if k in TOKEN_INPUTS})
        their_grads = student_grads(setup.student, theirs)
        result |= {
            f"{peer}_loss": theirs.item(),
            f"{peer}_same_parameters": our_grads.keys() == their_grads.keys(),
            f"{peer}_max_grad_diff": max(
                float((our_grads[n] - g).abs().max()) for n, g in their_grads.items()
            ),
        }
    return result | {"max_grad": max(float(g.abs().max()) for g in our_grads.values())}


IMPLEMENTATIONS = {
    "kdbench": run_kdbench,
    "tuned": run_tuned,
    "plain": run_plain,
    "textbrewer": run_textbrewer,
    "textbrewer_dynamic": lambda setup: run_textbrewer(setup, padded=False),
}


def main() -> None:
    spec = json.loads(sys.argv[1])
    torch.set_num_threads(int(spec.get("threads") or os.cpu_count()))
    setup = Setup(spec)
    if spec["impl"] == "check":
        print(json.dumps({**spec, **check(setup)}), flush=True)
        return
    batches = IMPLEMENTATIONS[spec["impl"]](setup)
    timed = batches.parts[1]
    examples = sum(int(b["input_ids"].shape[0]) for b in timed)
    tokens = sum(int(b["attention_mask"].sum()) for b in timed)
    padded = sum(int(b["input_ids"].numel()) for b in timed)
    print(
        json.dumps(
            {
                **spec,
                "device": str(setup.device),
                "tf32": setup.plan.tf32,
                "seconds": batches.seconds,
                "examples": examples,
                "examples_per_s": examples / batches.seconds,
                "tokens_per_s": tokens / batches.seconds,
                "padded_tokens": padded,
                "real_tokens": tokens,
                "peak_mib": batches.peak,
                "warmup_s": batches.warmup_seconds,
                "features_build_s": getattr(setup, "features_build_s", None),
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
