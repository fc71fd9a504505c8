"""The implementations kdbench is measured against, written the way their users write them.

* `tuned`: a Hugging Face loop as a careful user writes it: SDPA attention on both models, the
  features taken only at the mapped layers by forward hooks (the query, key and value projections,
  from which it rebuilds the attention probabilities and value relations, or the blocks' outputs),
  the teacher under `torch.inference_mode()`; the caller gives it kdbench's batches (dynamic
  padding, length-grouped).
* `plain`: a Hugging Face loop as run_glue's defaults and most examples write it: eager attention
  with `output_attentions=True` and `output_hidden_states=True` on every layer of both models
  (Hugging Face's SDPA attention cannot return attention maps), value projections read by forward
  hooks (MiniLM's value relation is not a model output), the teacher recomputed under
  `torch.no_grad()` every step, batches padded to the maximum length.
* `textbrewer`: TextBrewer's `GeneralDistiller` on the same models and the given batches (padded, or
  kdbench's), with the matching intermediate matches. Its attention losses expect pre-softmax scores
  from its own model code, Hugging Face returns probabilities, so the attention and value-relation
  KL are registered as match losses (the documented `register_new` route); hid_seq uses TextBrewer's
  own `hidden_mse` with a linear projection.

All compute the same losses as kdbench's objectives (the loops checked by `measure.py`'s `check`
mode).
"""

from __future__ import annotations

import math
import tempfile

import torch
import torch.nn.functional as F
from torch import nn

from kdbench.models.anatomy import encoder_layers

TOKEN_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def kd_params(plan) -> dict:
    """The prediction stage's vanilla KD: its kd term's params (temperature, alpha)."""
    (term,) = (term for term in plan.stages["prediction"].terms if term.loss == "kd")
    return term.params


# ---- the losses, on what Hugging Face returns
# ------------------------------------------------------------------


def masked_row_kl(student_probs, teacher_probs, mask):
    """KL(teacher || student) per row of [B, H, L, L] probabilities, averaged over heads and valid
    rows."""
    kl = F.kl_div(student_probs.clamp_min(1e-30).log(), teacher_probs, reduction="none").sum(
        -1
    )  # [B, H, L]
    rows = mask[:, None, :].to(kl.dtype)
    return (kl * rows).sum() / (rows.sum() * kl.shape[1])


def attention_kl(att_s, att_t, mask=None):
    """MiniLM's attention KL on `output_attentions` probabilities [B, H, L, L]."""
    return masked_row_kl(att_s, att_t, mask)


def relation(rows, columns, num_heads, mask):
    """softmax(A B^T / sqrt(d)) over valid keys, [B, H, L, L], from two projections [B, L, H*d] (A =
    queries or values, B = keys or values)."""
    b, length, width = rows.shape
    a, c = (
        x.view(b, length, num_heads, width // num_heads).transpose(1, 2) for x in (rows, columns)
    )
    scores = a @ c.transpose(-1, -2) / math.sqrt(a.shape[-1])
    scores = scores.masked_fill(~mask[:, None, None, :].bool(), float("-inf"))
    return scores.softmax(-1)


def value_kl(values_s, values_t, mask, num_heads):
    return masked_row_kl(
        relation(values_s, values_s, num_heads, mask),
        relation(values_t, values_t, num_heads, mask),
        mask,
    )


def hidden_mse(hidden_s, hidden_t, mask):
    """TinyBERT's hidden MSE over valid tokens ([B, L, D], student already projected)."""
    valid = mask.bool()
    return F.mse_loss(hidden_s[valid], hidden_t[valid])


def kd(student_logits, teacher_logits, labels, temperature, alpha):
    soft = (
        F.kl_div(
            F.log_softmax(student_logits / temperature, -1),
            F.softmax(teacher_logits / temperature, -1),
            reduction="batchmean",
        )
        * temperature**2
    )
    return alpha * soft + (1 - alpha) * F.cross_entropy(student_logits, labels)


class Hooks:
    """Collects, at every forward, the outputs of the given (0-based) layers' submodules (`value`:
    attention.self.value; `block`: the whole block, its output hidden state) in the order they
    run."""

    def __init__(self, model, layers, parts=("value",)):
        self.outputs: list[torch.Tensor] = []
        blocks = encoder_layers(model)
        modules = {
            "query": lambda b: b.attention.self.query,
            "key": lambda b: b.attention.self.key,
            "value": lambda b: b.attention.self.value,
            "block": lambda b: b,
        }
        self.handles = [
            modules[part](blocks[i]).register_forward_hook(self.record)
            for i in layers
            for part in parts
        ]

    def record(self, module, inputs, output):
        self.outputs.append(output[0] if isinstance(output, tuple) else output)

    def take(self) -> list[torch.Tensor]:
        taken, self.outputs = self.outputs, []
        return taken


# ---- the plain loop
# ----------------------------------------------------------------------------------------------


def plain_stage1(setup):
    """Returns (step, trained modules): one step of intermediate-layer distillation as a plain
    loop."""
    teacher, student, pairs = (
        setup.teacher,
        setup.student,
        setup.pairs,
    )  # pairs: (student, teacher), 1-based
    heads = student.config.num_attention_heads
    projection = nn.Linear(student.config.hidden_size, teacher.config.hidden_size).to(setup.device)
    objective = setup.spec["objective"]
    if objective == "att_kl+val_kl":
        values_t = Hooks(teacher, [t - 1 for _, t in pairs])
        values_s = Hooks(student, [s - 1 for s, _ in pairs])

    def step(batch):
        inputs = {k: v for k, v in batch.items() if k in TOKEN_INPUTS}
        mask = batch["attention_mask"]
        with torch.no_grad():
            out_t = teacher(**inputs, output_attentions=True, output_hidden_states=True)
        out_s = student(**inputs, output_attentions=True, output_hidden_states=True)
        loss = 0.0
        if objective == "att_kl+val_kl":
            vt, vs = values_t.take(), values_s.take()
            for i, (s, t) in enumerate(pairs):
                loss = loss + attention_kl(out_s.attentions[s - 1], out_t.attentions[t - 1], mask)
                loss = loss + value_kl(vs[i], vt[i], mask, heads)
        else:  # hid_seq
            for s, t in pairs:
                loss = loss + hidden_mse(
                    projection(out_s.hidden_states[s]), out_t.hidden_states[t], mask
                )
        return loss

    return step, [student] + ([projection] if objective == "hid_seq" else [])


def plain_stage2(setup):
    teacher, student, kd_cfg = setup.teacher, setup.student, kd_params(setup.plan)

    def step(batch):
        inputs = {k: v for k, v in batch.items() if k in TOKEN_INPUTS}
        with torch.no_grad():
            teacher_logits = teacher(**inputs).logits
        return kd(
            student(**inputs).logits,
            teacher_logits,
            batch["labels"],
            kd_cfg["temperature"],
            kd_cfg["alpha"],
        )

    return step, [student]


# ---- the tuned loop
# ----------------------------------------------------------------------------------------------


def tuned_stage1(setup):
    """Returns (step, trained modules): one step of intermediate-layer distillation as a careful
    user writes it."""
    teacher, student, pairs = (
        setup.teacher,
        setup.student,
        setup.pairs,
    )  # pairs: (student, teacher), 1-based
    heads = student.config.num_attention_heads
    projection = nn.Linear(student.config.hidden_size, teacher.config.hidden_size).to(setup.device)
    attention = setup.spec["objective"] == "att_kl+val_kl"  # else hid_seq
    parts = ("query", "key", "value") if attention else ("block",)
    hooks_t, hooks_s = (
        Hooks(teacher, [t - 1 for _, t in pairs], parts),
        Hooks(student, [s - 1 for s, _ in pairs], parts),
    )

    def features(hooks, mask):
        """Per mapped layer: (attention probabilities, value relation), or (its output hidden
        state,)."""
        taken = hooks.take()
        if not attention:
            return [(hidden,) for hidden in taken]
        return [
            (relation(q, k, heads, mask), relation(v, v, heads, mask))
            for q, k, v in zip(*[iter(taken)] * 3)
        ]

    def step(batch):
        inputs = {k: v for k, v in batch.items() if k in TOKEN_INPUTS}
        mask = batch["attention_mask"]
        with torch.inference_mode():
            teacher(**inputs)
            targets = features(hooks_t, mask)
        targets = [
            [x.clone() for x in layer] for layer in targets
        ]  # inference tensors cannot be saved for backward
        student(**inputs)
        loss = 0.0
        for ours, theirs in zip(features(hooks_s, mask), targets):
            if attention:
                loss = (
                    loss
                    + masked_row_kl(ours[0], theirs[0], mask)
                    + masked_row_kl(ours[1], theirs[1], mask)
                )
            else:
                loss = loss + hidden_mse(projection(ours[0]), theirs[0], mask)
        return loss

    return step, [student] + ([] if attention else [projection])


def tuned_stage2(setup):
    teacher, student, kd_cfg = setup.teacher, setup.student, kd_params(setup.plan)

    def step(batch):
        inputs = {k: v for k, v in batch.items() if k in TOKEN_INPUTS}
        with torch.inference_mode():
            teacher_logits = teacher(**inputs).logits
        return kd(
            student(**inputs).logits,
            teacher_logits.clone(),
            batch["labels"],
            kd_cfg["temperature"],
            kd_cfg["alpha"],
        )

    return step, [student]


# ---- TextBrewer
# --------------------------------------------------------------------------------------------------


def linear_schedule(warmup_steps: int, num_steps: int) -> dict:
    """TextBrewer's scheduler arguments for a linear warm-up then decay (None: a constant learning
    rate)."""
    from transformers import get_linear_schedule_with_warmup

    return {
        "scheduler_class": get_linear_schedule_with_warmup,
        "scheduler_args": {"num_warmup_steps": warmup_steps, "num_training_steps": num_steps},
    }


def textbrewer_finetune(model, batches, optimizer_for, schedule: dict) -> None:
    """Fine-tunes `model` on `batches` (dicts with labels) with TextBrewer's BasicTrainer."""
    from textbrewer import BasicTrainer, TrainingConfig

    with tempfile.TemporaryDirectory() as out_dir:
        config = TrainingConfig(
            device=str(next(model.parameters()).device),
            output_dir=out_dir,
            ckpt_steps=10**9,
            log_dir=None,
        )
        trainer = BasicTrainer(config, model, lambda batch, outputs: {"losses": [outputs.loss]})
        with trainer:
            trainer.train(
                optimizer_for([model]), batches, num_epochs=None, num_steps=len(batches), **schedule
            )


def textbrewer_train(
    setup, batches, optimizer_for, num_steps: int, schedule: dict | None = None
) -> None:
    """Runs TextBrewer's GeneralDistiller for `num_steps` over `batches` (dicts of tensors), with
    `schedule` (:func:`linear_schedule`) or a constant learning rate."""
    import textbrewer
    from textbrewer import DistillationConfig, GeneralDistiller, TrainingConfig

    teacher, student, pairs = setup.teacher, setup.student, setup.pairs
    heads = student.config.num_attention_heads
    objective = setup.spec["objective"]
    textbrewer.presets.register_new("match_Loss", "attention_kl_probs", attention_kl)
    textbrewer.presets.register_new(
        "match_Loss", "value_relation_kl", lambda vs, vt, mask=None: value_kl(vs, vt, mask, heads)
    )
    values = {}
    if objective == "att_kl+val_kl":
        values = {
            "T": Hooks(teacher, [t - 1 for _, t in pairs]),
            "S": Hooks(student, [s - 1 for s, _ in pairs]),
        }
        matches = [
            {
                "layer_T": t - 1,
                "layer_S": s - 1,
                "feature": "attention",
                "loss": "attention_kl_probs",
                "weight": 1,
            }
            for s, t in pairs
        ]
        matches += [
            {
                "layer_T": i,
                "layer_S": i,
                "feature": "hidden",
                "loss": "value_relation_kl",
                "weight": 1,
            }
            for i in range(len(pairs))
        ]
        config = DistillationConfig(intermediate_matches=matches, kd_loss_weight=0)
    elif objective == "hid_seq":
        width_s, width_t = student.config.hidden_size, teacher.config.hidden_size
        matches = [
            {
                "layer_T": t,
                "layer_S": s,
                "feature": "hidden",
                "loss": "hidden_mse",
                "weight": 1,
                "proj": ["linear", width_s, width_t],
            }
            for s, t in pairs
        ]
        config = DistillationConfig(intermediate_matches=matches, kd_loss_weight=0)
    else:  # vanilla KD, prediction layer
        kd_cfg = kd_params(setup.plan)
        config = DistillationConfig(
            temperature=kd_cfg["temperature"],
            kd_loss_type="ce",
            kd_loss_weight=kd_cfg["alpha"],
            hard_label_weight=1 - kd_cfg["alpha"],
            intermediate_matches=[],
        )

    def adaptor(role):
        def adapt(batch, outputs):
            result = {"inputs_mask": batch["attention_mask"], "logits": outputs.logits}
            if objective == "att_kl+val_kl":
                result.update(attention=outputs.attentions, hidden=values[role].take())
            elif objective == "hid_seq":
                result["hidden"] = outputs.hidden_states
            if outputs.loss is not None and role == "S":
                result["losses"] = [outputs.loss]
            if objective != "vanilla_kd":
                del result["logits"]  # stage 1: no logit term
            return result

        return adapt

    stage1 = objective != "vanilla_kd"
    with tempfile.TemporaryDirectory() as out_dir:
        train_config = TrainingConfig(
            device=str(setup.device), output_dir=out_dir, ckpt_steps=10**9, log_dir=None
        )
        distiller = GeneralDistiller(
            train_config, config, teacher, student, adaptor("T"), adaptor("S")
        )
        with distiller:
            distiller.train(
                optimizer_for([student]),
                batches,
                num_steps=num_steps,
                **(schedule or {}),
                **({"output_attentions": True, "output_hidden_states": True} if stage1 else {}),
            )
