"""An objective's terms from config: each term's loss, feature, weight, layer pairs and parameters,
validated against the architectures, the task and the setting.

Config (data only, `conf/objective/*.yaml`):
    name: att_kl+val_kl
    mapping: init      # the terms' default: init | fixed | last | uniform | embeddings | [t1, ...]
    terms:
      - {loss: att_kl, feature: attention_scores, weight: 1.0}
      - {loss: val_kl, feature: values, weight: 1.0}

A term's keys are declared once in `kdbench.planning.group_keys.TermKeys`. Its `loss` names an
entry of `losses.LOSSES`, which declares the rules of the term's `params`; its `feature` names one
of `features.FEATURES` (or LOGITS).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kdbench.errors import ConfigError, lookup
from kdbench.models.layers import resolve_pairs
from kdbench.objectives.features import FEATURES, token_level
from kdbench.objectives.loss_entry import LossEntry
from kdbench.objectives.losses import LOSSES
from kdbench.objectives.tensors import LOGITS
from kdbench.planning.declared import with_defaults
from kdbench.planning.group_keys import TermKeys
from kdbench.planning.rules import shown


@dataclass
class Term:
    name: str
    loss: str  # a LOSSES key
    feature: str  # a FEATURES key, or LOGITS
    weight: float
    # (student layer, teacher layer); [(LOGITS, LOGITS)] for the logits
    pairs: list[tuple[int, int]]
    params: dict = field(default_factory=dict)  # the loss function's keyword arguments
    projected: bool = False  # the student's features go through a learnable W_h first
    positions: str = "masked"  # MLM logits at the masked positions or every attended token
    # each side's layers a concatenating (`module`) loss reads when they are not its pairs' (every
    # layer of each side: `layers: every`); None: the pairs'
    layers: tuple[list[int], list[int]] | None = None

    def sides(self) -> tuple[list[int], list[int]]:
        """The layers the term reads on each side, (student's, teacher's)."""
        if self.layers is not None:
            return self.layers
        return [s for s, _ in self.pairs], [t for _, t in self.pairs]


def build_terms(
    objective_name: str,
    term_specs: list[dict],
    default_mapping,
    init_layers: list[int] | None,
    student_conf,
    teacher_conf,
    *,
    regression: bool,
    agnostic: bool,
    teacher_has_mlm_head: bool,
    at: str = "objective.terms",
    mapping_at: str = "objective.mapping",
) -> list[Term]:
    """Terms of an objective's term specs, validated against the architectures, the task and the
    setting.

    `term_specs`: plain dicts of `TermKeys`, at config path `at`. `default_mapping`: the layer
    mapping of a term without its own `mapping` (see `kdbench.models.layers.resolve_pairs`), at
    config path `mapping_at`.
    """
    depths = (student_conf.num_hidden_layers, teacher_conf.num_hidden_layers)
    terms = []
    for index, spec in enumerate(term_specs):
        spec = with_defaults(spec, TermKeys)
        loss = spec.get("loss")
        entry = lookup(LOSSES, loss, "loss")
        _check_setting(objective_name, loss, entry, regression, agnostic, teacher_has_mlm_head)
        feature = spec["feature"] or entry.features[0]
        _check_feature(objective_name, index, loss, entry, feature, student_conf, teacher_conf)
        mapping = (
            (spec["mapping"], f"{at}.{index}.mapping")
            if spec["mapping"]
            else (default_mapping, mapping_at)
        )
        pairs = _pairs(spec, feature, mapping, init_layers, depths)
        projected = _projected(
            objective_name, index, spec["projection"], entry, student_conf, teacher_conf
        )
        params = _params(objective_name, at, index, spec, entry, student_conf, teacher_conf)
        positions = _positions(objective_name, index, spec["positions"], entry)
        layers = _every_layer(objective_name, index, spec, entry, depths)
        weight, name = float(spec["weight"]), spec["name"] or loss
        terms.append(Term(name, loss, feature, weight, pairs, params, projected, positions, layers))
    _check_unique_names(objective_name, terms)
    return terms


def _pairs(
    spec: dict,
    feature: str,
    mapping: tuple,
    init_layers: list[int] | None,
    depths: tuple[int, int],
) -> list[tuple[int, int]]:
    """The term's (student, teacher) layer pairs: its mapping's (`mapping`: the layer mapping it
    reads and that mapping's config key), led by the embedding outputs' (0, 0) when
    `embedding_pair` asks; the logits' one pair for LOGITS."""
    if feature == LOGITS:
        pairs = [(LOGITS, LOGITS)]
    else:
        layers, at = mapping
        pairs = resolve_pairs(layers, init_layers, *depths, at=at)
    if spec["embedding_pair"] and (0, 0) not in pairs:
        pairs = [(0, 0), *pairs]
    return pairs


def _params(
    objective: str, at: str, index: int, spec: dict, entry: LossEntry, student_conf, teacher_conf
) -> dict:
    """The loss function's keyword arguments: the term's `params` (`term_params`), and the relation
    heads (the teacher's head count unless given) for a loss that takes them."""
    params = term_params(objective, f"{at}.{index}", index, spec, entry)
    if entry.takes_num_heads:
        params.setdefault("num_heads", teacher_conf.num_attention_heads)
        _check_relation_heads(objective, index, params["num_heads"], student_conf, teacher_conf)
    return params


def check_terms(objective: str, at: str, term_specs: list[dict]) -> None:
    """Each term of the list at config path `at` names a loss and gives it parameters it takes, in
    their rules: a list the setting does not build (`terms_task_agnostic` in a task-specific run) is
    checked too."""
    for index, spec in enumerate(term_specs):
        entry = lookup(LOSSES, spec.get("loss"), "loss")
        term_params(objective, f"{at}.{index}", index, spec, entry)


def term_params(objective: str, at: str, index: int, spec: dict, entry: LossEntry) -> dict:
    """The `params` of the term at config path `at` (its index `index`), each a parameter its loss
    takes and in that parameter's rule (`LossEntry.param_rules`)."""
    params, rules = dict(spec.get("params") or {}), entry.param_rules
    if unknown := sorted(set(params) - set(rules)):
        raise ConfigError(
            f"objective {objective}, term {index}: {at}.params.{unknown[0]} is not a parameter of "
            f"{spec.get('loss')}; valid: {', '.join(sorted(rules)) or 'none'}"
        )
    for name, value in params.items():
        if rules[name] is not None and not rules[name].admits(value):
            raise ConfigError(f"{at}.params.{name}={shown(value)} must be {rules[name].text}")
    return params


def check_padding(at: str, padding: str, terms: list[Term]) -> None:
    """With `padding` other than masked (the stage at config path `at`), every term that reads
    padded positions has a loss that takes the padding: no other loss has a released form."""
    if padding == "masked":
        return
    for term in terms:
        if token_level(term.feature) and not LOSSES[term.loss].takes_padding:
            takes = ", ".join(name for name, entry in LOSSES.items() if entry.takes_padding)
            raise ConfigError(
                f"{at}.padding={padding} is TinyBERT's average over padding, which only {takes} "
                f"have; the term {term.name} is {term.loss} on {term.feature}: set "
                f"{at}.padding=masked, or use those losses"
            )


def _check_unique_names(objective: str, terms: list[Term]) -> None:
    """Term names key the losses and the learnable parts: each appears once."""
    names = [t.name for t in terms]
    if len(set(names)) != len(names):
        raise ConfigError(
            f"objective {objective}: term names {names} repeat; give each term a `name`"
        )


def _check_setting(
    objective: str,
    loss: str,
    entry: LossEntry,
    regression: bool,
    agnostic: bool,
    teacher_has_mlm_head: bool,
) -> None:
    """The loss has what it reads in this setting, on this task, with this teacher."""
    if entry.classification_only and agnostic:
        raise ConfigError(
            f"objective {objective}: {loss} contrasts examples by their task labels, "
            "which raw text does not have: use it in setting=task_specific"
        )
    if entry.classification_only and regression:
        raise ConfigError(
            f"objective {objective}: {loss} contrasts examples of different classes and needs a "
            "classification task; this task is regression (STS-B): choose another objective or task"
        )
    if entry.mlm and not agnostic:
        raise ConfigError(
            f"objective {objective}: {loss} reads MLM logits, which exist only in "
            "setting=task_agnostic"
        )
    if entry.mlm and not teacher_has_mlm_head:
        raise ConfigError(
            f"objective {objective} distils MLM logits ({loss}) but this teacher has no MLM head "
            "(teacher.has_mlm_head=false): choose a teacher with one (teacher=bert_base_uncased, "
            "or teacher.has_mlm_head=true for a checkpoint that has one) or an objective on "
            "attention or hidden states"
        )


def _positions(objective: str, index: int, positions: str, entry: LossEntry) -> str:
    """Where the term reads MLM logits: every attended token only for a soft-target term."""
    if positions == "attended" and (not entry.mlm or entry.takes_labels):
        raise ConfigError(
            f"objective {objective}, term {index}: positions=attended reads MLM soft "
            "targets at every token, which only a soft-target MLM loss (mlm_kd) can "
            "use: remove the key"
        )
    return positions


def _every_layer(
    objective: str, index: int, spec: dict, entry: LossEntry, depths: tuple[int, int]
) -> tuple[list[int], list[int]] | None:
    """For `layers: every`, each side's embeddings and every layer (a concatenating loss only, its
    pairs then unused); None for `mapped`."""
    if spec["layers"] == "mapped":
        return None
    if not entry.module:
        raise ConfigError(
            f"objective {objective}, term {index}: layers=every concatenates each side's layers, "
            f"which only a concatenating loss (crd) reads, not {spec['loss']}: remove the key"
        )
    if spec["mapping"] is not None or spec["embedding_pair"]:
        raise ConfigError(
            f"objective {objective}, term {index}: layers=every reads every layer and the "
            "embeddings of each side, so its mapping and embedding_pair say nothing: remove them"
        )
    return list(range(depths[0] + 1)), list(range(depths[1] + 1))


def _projected(
    objective: str,
    index: int,
    projection: bool | None,
    entry: LossEntry,
    student_conf,
    teacher_conf,
) -> bool:
    """Whether the term learns a W_h: the loss's own choice unless the term's `projection` says."""
    if projection is None or projection == entry.projected:
        return entry.projected
    if projection:
        raise ConfigError(
            f"objective {objective}, term {index}: projection=true, but its loss "
            "compares features without a width projection: remove the key"
        )
    widths = (student_conf.hidden_size, teacher_conf.hidden_size)
    if widths[0] != widths[1]:
        raise ConfigError(
            f"objective {objective}, term {index}: projection=false compares raw "
            f"hidden states, which needs the student's width {widths[0]} to equal "
            f"the teacher's {widths[1]}: give a student of the teacher's width, or "
            "projection=null"
        )
    return False


def _check_relation_heads(
    objective: str, index: int, heads: int, student_conf, teacher_conf
) -> None:
    """Relation heads split both models' widths."""
    widths = (student_conf.hidden_size, teacher_conf.hidden_size)
    if any(width % heads for width in widths):
        raise ConfigError(
            f"objective {objective}, term {index}: params.num_heads={heads} relation heads must "
            "divide the "
            f"student's width {widths[0]} and the teacher's {widths[1]}: choose a common divisor"
        )


def _check_feature(
    objective: str,
    index: int,
    loss: str,
    entry: LossEntry,
    feature: str,
    student_conf,
    teacher_conf,
) -> None:
    """The loss reads this feature, and the two models have it in comparable shapes."""
    if feature not in entry.features:
        raise ConfigError(
            f"objective {objective}, term {index}: loss {loss} reads {', '.join(entry.features)}, "
            f"not {feature!r}"
        )
    heads = (student_conf.num_attention_heads, teacher_conf.num_attention_heads)
    if feature != LOGITS and FEATURES[feature].per_head and heads[0] != heads[1]:
        raise ConfigError(
            f"objective {objective}: {loss} compares attention heads one to one, but the student "
            f"has {heads[0]} heads "
            f"and the teacher {heads[1]}; use a student with as many heads "
            f"(student.num_heads={heads[1]}), or "
            "objective=minilm_v2 (relations work for any head count)"
        )
