"""The valid values of every number, flag and choice a config sets, and the one check that refuses
the others.

`RANGES` maps a config path to its `Rule` (`kdbench.planning.rules`); a `*` stands for any list
index or
mapping key (`objective.terms.*.weight`). The trainer keys' rules come from their declarations
(`kdbench.planning.trainer_specs`). `check_ranges` walks a config group's resolved values and
refuses the
first one its rule does not admit with a ConfigError naming it as `path=value` and saying what is
valid.
"""

from __future__ import annotations

import json

from kdbench.data.files import TAB
from kdbench.errors import ConfigError
from kdbench.planning.rules import (
    COLUMN,
    COUNT,
    FLAG,
    FRACTION,
    LEARNING_RATE,
    NAME_OR_NUMBER,
    NON_NEGATIVE,
    NON_NEGATIVE_COUNT,
    POSITIVE,
    PROBABILITY,
    SEED,
    TEXT,
    Rule,
    choice,
    entries,
    integer,
    number,
)
from kdbench.planning.stage_specs import STAGE_RULES
from kdbench.planning.trainer_specs import TRAINER_RULES

SHAPE = {
    "num_layers": COUNT,
    "hidden_size": COUNT,
    "num_heads": COUNT,
    "ffn_size": COUNT,
    "max_positions": COUNT,
}
TERM = {
    "weight": NON_NEGATIVE,
    "params.temperature": POSITIVE,
    "params.alpha": PROBABILITY,
    "params.momentum": PROBABILITY,
    "params.feat_dim": COUNT,
    "params.num_negatives": COUNT,
    "params.num_heads": COUNT,
    "projection": FLAG.or_null("the loss's own choice"),
    "embedding_pair": FLAG,
    "params.form": choice("infonce", "nce", meaning="nce: CRD as released"),
    "positions": choice("masked", "attended", meaning="attended: every real token"),
    "params.scale_by": choice(
        "own", "teacher", meaning="teacher: both relations by the teacher's head size"
    ),
}
EXAMPLES = integer(1, text="a positive number of examples").or_null("all of them")


def under(prefix: str, rules: dict[str, Rule]) -> dict[str, Rule]:
    return {f"{prefix}.{key}": rule for key, rule in rules.items()}


RANGES: dict[str, Rule] = {
    "seed": SEED,
    "save_student": FLAG,
    "measure_cost": FLAG,
    "kdbench.debug": FLAG,
    "prediction_kd.temperature": POSITIVE,
    "prediction_kd.alpha": PROBABILITY,
    "task.lr": LEARNING_RATE,
    "task.batch_size": COUNT,
    "task.tsv.header": FLAG,
    "task.tsv.columns.*": COLUMN,
    "task.order": NON_NEGATIVE_COUNT,
    "task.regression": FLAG,
    "task.split_seed": SEED,
    "task.validation_fraction": number(0, 1, open_low=True, open_high=True),
    "task.text_columns": entries(TEXT, text="a list of one or two column names"),
    "task.label_column": TEXT,
    "task.delimiter": Rule(
        lambda value: isinstance(value, str) and (len(value) == 1 or value == TAB),
        "one character, e.g. ';', or '\\t' for a tab",
    ).or_null("found from the file"),
    "task.label_names": entries(NAME_OR_NUMBER, text="a list of label names").or_null(
        "the training labels, sorted"
    ),
    "task.metric": entries(
        choice(
            "accuracy",
            "f1",
            "f1_macro",
            "mcc",
            "pearson",
            "spearman",
            meaning="the first is the score",
        )
    ).or_null("the kind's default"),
    "teacher.has_mlm_head": FLAG,
    "teacher.finetune_lr": LEARNING_RATE,
    **under("teacher.shape", SHAPE),
    **under("student", SHAPE),
    "init.layers": entries(COUNT, text="a list of teacher layers, each a positive integer"),
    "init.copy_embeddings": FLAG,
    "init.copy_head": FLAG,
    "init.carry_projections": FLAG,
    **under("objective.terms.*", TERM),
    **under("objective.terms_task_agnostic.*", TERM),
    **under("trainer", TRAINER_RULES),
    **under("stages.*", STAGE_RULES),
    **under("stages.*.objective.terms.*", TERM),
    "corpus.seq_len": integer(3),  # [CLS], text, [SEP]
    "corpus.heldout_fraction": FRACTION,
    "corpus.max_docs": COUNT.or_null("every document"),
    "data.train_limit": EXAMPLES,
    "data.eval_limit": EXAMPLES,
    "data.subset_seed": SEED,
    "augment.n_per_example": COUNT,
    "augment.p_replace": PROBABILITY,
    "augment.top_k": COUNT,
    "augment.batch_size": COUNT,
    "augment.seed": SEED,
    **under("augment.mlm_shape", SHAPE),
    "augment.fields": choice("separate", "first", "all", meaning="separate: one at a time"),
    "augment.mlm_with_original": FLAG,
    "augment.use_n_per_task": FLAG,
    "augment.n_per_task.*": COUNT,
}


def rule_for(path: str) -> Rule | None:
    """The rule of a dotted config path (`objective.terms.0.weight`), or None where no rule governs
    it."""
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


def check_ranges(values, at: str = ""):
    """`values` (a config group's resolved values under `at`; "" for the top level), one value of a
    list key as a list of one; refuses the first value its rule does not admit. A list or mapping
    without a rule of its own is checked entry by entry."""
    rule = rule_for(at) if at else None
    if rule is not None:
        values = rule.listed(values)
        if not rule.admits(values):
            raise ConfigError(f"{at}={shown(values)} must be {rule.text}")
        return values
    if isinstance(values, dict):
        return {
            key: check_ranges(value, f"{at}.{key}" if at else key) for key, value in values.items()
        }
    if isinstance(values, list):
        return [check_ranges(value, f"{at}.{key}") for key, value in enumerate(values)]
    return values
