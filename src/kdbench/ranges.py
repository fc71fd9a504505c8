"""The valid values of every number, flag and choice a config sets, and the one check that refuses the others.

`RANGES` maps a config path to its `Rule`; a `*` stands for any list index or mapping key
(`objective.terms.*.weight`). `check_ranges` walks a config group's resolved values and refuses the first one its
rule does not admit with a ConfigError naming it as `path=value` and saying what is valid.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass

from kdbench.errors import ConfigError


@dataclass(frozen=True)
class Rule:
    """What a config key admits, and how a message says it."""

    admits: Callable[[object], bool]
    text: str  # completes "must be ...", e.g. "a positive integer"

    def or_null(self, meaning: str) -> Rule:
        return Rule(lambda value: value is None or self.admits(value), f"{self.text}, or null ({meaning})")


def is_integer(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value) -> bool:
    """A finite int or float; a bool is not a number here (`true` for a count is a mistake)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def integer(low: int, high: int | None = None, text: str | None = None) -> Rule:
    default = f"an integer >= {low}" if high is None else f"an integer from {low} to {high}"
    return Rule(lambda value: is_integer(value) and low <= value and (high is None or value <= high), text or default)


def number(low: float, high: float | None = None, *, open_low: bool = False, open_high: bool = False,
           text: str | None = None) -> Rule:
    """A finite number from `low` (excluded with `open_low`) to `high` (excluded with `open_high`; None: no bound)."""

    def admits(value) -> bool:
        above = is_number(value) and (value > low if open_low else value >= low)
        return above and (high is None or (value < high if open_high else value <= high))

    if high is None:
        default = f"a number {'>' if open_low else '>='} {low}"
    else:
        default = f"a number in {'(' if open_low else '['}{low}, {high}{')' if open_high else ']'}"
    return Rule(admits, text or default)


def choice(*values: str, meaning: str) -> Rule:
    return Rule(lambda value: isinstance(value, str) and value in values, f"one of {', '.join(values)} ({meaning})")


def entries(rule: Rule, count: int | None = None, text: str | None = None) -> Rule:
    """A list whose every entry `rule` admits (exactly `count` of them when given)."""

    def admits(value) -> bool:
        return isinstance(value, list) and count in (None, len(value)) and all(map(rule.admits, value))

    return Rule(admits, text or f"a list of {count or 'any number of'} entries, each {rule.text}")


COUNT = integer(1, text="a positive integer")
NON_NEGATIVE_COUNT = integer(0, text="a non-negative integer")
SEED = integer(0, 2**32 - 1)
POSITIVE = number(0, open_low=True)
NON_NEGATIVE = number(0)
PROBABILITY = number(0, 1)
FRACTION = number(0, 1, open_high=True)
LEARNING_RATE = number(0, open_low=True, text="a positive learning rate, e.g. 1e-5")
FLAG = Rule(lambda value: isinstance(value, bool), "true or false")
TEXT = Rule(lambda value: isinstance(value, str) and bool(value), "a non-empty name")
NAME_OR_NUMBER = Rule(lambda value: isinstance(value, (str, int)) and value != "", "a name")
COLUMN = Rule(lambda value: NON_NEGATIVE_COUNT.admits(value) or isinstance(value, str),
              "a column name, or a column position from 0 in a file without a header")

SHAPE = {"num_layers": COUNT, "hidden_size": COUNT, "num_heads": COUNT, "ffn_size": COUNT, "max_positions": COUNT}
TERM = {"weight": NON_NEGATIVE, "params.temperature": POSITIVE, "params.alpha": PROBABILITY,
        "params.momentum": PROBABILITY, "params.feat_dim": COUNT, "params.num_negatives": COUNT,
        "params.num_heads": COUNT, "projection": FLAG.or_null("the loss's own choice"),
        "embedding_pair": FLAG,
        "params.form": choice("infonce", "nce", meaning="nce: CRD as released"),
        "positions": choice("masked", "attended", meaning="attended: every real token"),
        "params.scale_by": choice("own", "teacher",
                                  meaning="teacher: both relations by the teacher's head size")}
TRAINER = {
    "lr": LEARNING_RATE, "teacher_lr": LEARNING_RATE.or_null("the task's lr"),
    "stage2_lr": LEARNING_RATE.or_null("trainer.lr"), "batch_size": COUNT, "eval_batch_size": COUNT,
    "max_length": integer(4), "warmup_ratio": FRACTION, "warmup_ratio_per_task.*": FRACTION,
    "weight_decay": NON_NEGATIVE, "adam_betas": entries(FRACTION, 2), "adam_eps": POSITIVE,
    "max_grad_norm": POSITIVE.or_null("no clipping"), "log_every": COUNT, "checkpoint_every": NON_NEGATIVE_COUNT,
    "teacher_epochs": NON_NEGATIVE_COUNT, "stage1_epochs": NON_NEGATIVE_COUNT, "stage2_epochs": NON_NEGATIVE_COUNT,
    "teacher_seed": SEED, "max_steps": COUNT.or_null("epochs, not steps"),
    "device_batch_size": COUNT.or_null("the whole batch"), "eval_every": NON_NEGATIVE_COUNT,
    "heldout_batches": NON_NEGATIVE_COUNT, "student_dropout": FRACTION.or_null("the model family's"),
    "teacher_features_gib": NON_NEGATIVE,
    "device": Rule(lambda value: isinstance(value, str), "a device: auto, cpu, cuda or cuda:N"),
    "precision": choice("fp32", "bf16", "auto", meaning="auto: bf16 on a GPU that has it natively"),
    "num_workers": Rule(lambda value: value == "auto" or NON_NEGATIVE_COUNT.admits(value),
                        "auto or a number of DataLoader worker processes (0: none)"),
    "stage1_schedule": choice("linear", "constant", meaning="constant: TinyBERT's stage 1"),
    "mlm_smoothing": POSITIVE.or_null("uniform masking"),
    "mask_inputs": choice("objective", "always", meaning="always: every objective's input"),
    **dict.fromkeys(("checkpoint_epochs", "keep_checkpoints", "cache_teacher_logits", "cache_teacher_features",
                     "group_by_length", "teacher_group_by_length", "progress_bar", "compile", "fused_losses",
                     "recompute_losses", "recompute_attention", "teacher_dropout", "tf32",
                     "teacher_best_checkpoint"), FLAG),
}
EXAMPLES = integer(1, text="a positive number of examples").or_null("all of them")


def under(prefix: str, rules: dict[str, Rule]) -> dict[str, Rule]:
    return {f"{prefix}.{key}": rule for key, rule in rules.items()}


RANGES: dict[str, Rule] = {
    "seed": SEED, "save_student": FLAG, "measure_cost": FLAG, "kdbench.debug": FLAG,
    "prediction_kd.temperature": POSITIVE, "prediction_kd.alpha": PROBABILITY,
    "task.lr": LEARNING_RATE, "task.batch_size": COUNT, "task.tsv.header": FLAG, "task.tsv.columns.*": COLUMN,
    "task.order": NON_NEGATIVE_COUNT, "task.regression": FLAG, "task.split_seed": SEED,
    "task.validation_fraction": number(0, 1, open_low=True, open_high=True),
    "task.text_columns": entries(TEXT, text="a list of one or two column names"),
    "task.label_column": TEXT,
    "task.label_names": entries(NAME_OR_NUMBER, text="a list of label names").or_null(
        "the training labels, sorted"),
    "task.metric": entries(choice("accuracy", "f1", "f1_macro", "mcc", "pearson", "spearman",
                                  meaning="the first is the score")).or_null("the kind's default"),
    "teacher.has_mlm_head": FLAG, "teacher.finetune_lr": LEARNING_RATE, **under("teacher.shape", SHAPE),
    **under("student", SHAPE),
    "init.layers": entries(COUNT, text="a list of teacher layers, each a positive integer"),
    "init.copy_embeddings": FLAG, "init.copy_head": FLAG, "init.carry_projections": FLAG,
    **under("objective.terms.*", TERM), **under("objective.terms_task_agnostic.*", TERM),
    **under("trainer", TRAINER),
    "corpus.seq_len": integer(3),  # [CLS], text, [SEP]
    "corpus.heldout_fraction": FRACTION, "corpus.max_docs": COUNT.or_null("every document"),
    "data.train_limit": EXAMPLES, "data.eval_limit": EXAMPLES, "data.subset_seed": SEED,
    "augment.n_per_example": COUNT, "augment.p_replace": PROBABILITY, "augment.top_k": COUNT,
    "augment.batch_size": COUNT, "augment.seed": SEED, **under("augment.mlm_shape", SHAPE),
    "augment.fields": choice("separate", "first", "all", meaning="separate: one at a time"),
    "augment.mlm_with_original": FLAG, "augment.use_n_per_task": FLAG,
    "augment.n_per_task.*": COUNT,
}


def rule_for(path: str) -> Rule | None:
    """The rule of a dotted config path (`objective.terms.0.weight`), or None where no rule governs it."""
    parts = path.split(".")
    for pattern, rule in RANGES.items():
        keys = pattern.split(".")
        if len(keys) == len(parts) and all(key in ("*", part) for key, part in zip(keys, parts)):
            return rule
    return None


def shown(value) -> str:
    """A value as an override writes it: true, null, 'text', [1, 2]."""
    if isinstance(value, list):
        return f"[{', '.join(map(shown, value))}]"
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    return repr(value) if isinstance(value, str) else str(value)


def check_ranges(values, at: str = "") -> None:
    """Refuse the first value under `at` (a config group's resolved values; "" for the top level) that its rule
    does not admit; a list or mapping without a rule of its own is checked entry by entry."""
    rule = rule_for(at) if at else None
    if rule is not None:
        if not rule.admits(values):
            raise ConfigError(f"{at}={shown(values)} must be {rule.text}")
        return
    items = values.items() if isinstance(values, dict) else enumerate(values) if isinstance(values, list) else ()
    for key, value in items:
        check_ranges(value, f"{at}.{key}" if at else str(key))
