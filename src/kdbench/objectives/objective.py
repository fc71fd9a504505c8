"""An objective = weighted loss terms read from config, each applied to mapped (student, teacher) layer pairs.

Config (data only, `conf/objective/*.yaml`):
    name: att_kl+val_kl
    mapping: init                      # default for the terms: init | last | uniform | embeddings | [t1, t2, ...]
    terms:
      - {loss: att_kl, feature: attention_scores, weight: 1.0}
      - {loss: val_kl, feature: values, weight: 1.0}

A term's loss is summed over its layer pairs (TinyBERT's and the paper's convention) and weighted;
learnable parts (projections) live here, on the student side, and are trained with the student.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch
from omegaconf import DictConfig, ListConfig, OmegaConf
from torch import nn
from torch.utils.checkpoint import checkpoint

from kdbench.errors import ConfigError
from kdbench.initialization import every_kth, validate_layer_list
from kdbench.objectives import functional as F
from kdbench.objectives.features import FEATURES, TOKEN_LEVEL
from kdbench.objectives.score_maps import score_map_loss


@dataclass(frozen=True)
class LossEntry:
    """How a loss is applied. Pairwise losses are summed over layer pairs; a `module` loss (CRD) is a learnable
    module called once on the features of all mapped layers concatenated."""

    fn: Callable[..., torch.Tensor] | None
    features: tuple[str, ...]  # features the loss is defined on
    same_heads: bool = False  # student and teacher must have equal head counts
    projected: bool = False  # a learnable student->teacher width projection precedes it
    heads_param: bool = False  # takes `num_heads` (relation heads; default: the teacher's head count)
    module: Callable[..., nn.Module] | None = None  # builds the learnable loss module (CRD)
    classification_only: bool = False
    takes_labels: bool = False  # called with the batch's labels (task labels, or the MLM's original ids)
    mlm: bool = False  # reads masked-language-model logits (task-agnostic setting, a teacher with an MLM head)
    score_map: str | None = None  # its form in `score_maps` (gradient formed in the forward pass): "kl" or "mse"


def _contrastive(student_width, teacher_width, train_labels, seed, **params):
    from kdbench.objectives.crd import ContrastiveTerm

    return ContrastiveTerm(student_width, teacher_width, train_labels, seed=seed, **params)


LOSSES: dict[str, LossEntry] = {
    "kd": LossEntry(F.kd_loss, ("logits",), takes_labels=True),
    "mlm_kd": LossEntry(F.soft_cross_entropy, ("logits",), mlm=True),
    "mlm": LossEntry(F.mlm_loss, ("logits",), takes_labels=True, mlm=True),
    "att_mse": LossEntry(F.att_mse, ("attention_scores",), same_heads=True, score_map="mse"),
    "att_kl": LossEntry(F.att_kl, ("attention_scores",), same_heads=True, score_map="kl"),
    "val_kl": LossEntry(F.val_kl, ("values",), same_heads=True, score_map="kl"),
    "relation_kl": LossEntry(F.relation_kl, ("query", "key", "value"), heads_param=True, score_map="kl"),
    "hid_mse": LossEntry(F.hid_mse, ("hidden", "cls"), projected=True),
    "cosine": LossEntry(F.cosine_loss, ("hidden", "cls"), projected=True),
    "crd": LossEntry(None, ("cls",), module=_contrastive, classification_only=True),
}
LOGITS = "logits"  # the records key of the model outputs (not a layer)


def lookup(registry: Mapping, name: str, kind: str):
    if name not in registry:
        raise ConfigError(f"unknown {kind} {name!r}; valid: {', '.join(sorted(registry))}")
    return registry[name]


def resolve_pairs(
    mapping, init_layers: list[int] | None, student_layers: int, teacher_layers: int
) -> list[tuple[int, int]]:
    """(student layer, teacher layer) pairs, 1-based, 0 = embeddings; validated once here."""
    if isinstance(mapping, (list, ListConfig)):
        layers = list(mapping)
        validate_layer_list(layers, teacher_layers, student_layers, what="objective.mapping")
        return list(zip(range(1, student_layers + 1), layers))
    if mapping == "init" and init_layers is not None:
        return list(zip(range(1, student_layers + 1), init_layers))
    if mapping in ("init", "uniform"):  # random init has no source layers: TinyBERT's uniform g(m) = k*m
        return list(zip(range(1, student_layers + 1), every_kth(teacher_layers, student_layers)))
    if mapping == "last":
        return [(student_layers, teacher_layers)]
    if mapping == "embeddings":
        return [(0, 0)]
    raise ConfigError(
        f"unknown layer mapping {mapping!r}; valid: init, last, uniform, embeddings, or a list of teacher layers"
    )


@dataclass
class Term:
    name: str
    loss: str
    feature: str
    weight: float
    pairs: list[tuple[int, int]]
    params: dict = field(default_factory=dict)


def build_terms(objective_cfg: DictConfig, init_layers, student_conf, teacher_conf, *, regression: bool = False,
                setting: DictConfig | None = None, teacher_has_mlm_head: bool = False) -> list[Term]:
    """Terms of an objective config, validated against the architectures, the task and the setting.

    In the task-agnostic setting an objective's `terms_task_agnostic` (if any) replace its `terms`, and the
    setting's `mapping` (the last layer) replaces the objective's; a term's own `mapping` always holds.
    """
    agnostic = setting is not None and setting.name == "task_agnostic"
    specs = objective_cfg.terms
    if agnostic and objective_cfg.get("terms_task_agnostic"):
        specs = objective_cfg.terms_task_agnostic
    default_mapping = (setting.get("mapping") if setting is not None else None) or objective_cfg.mapping
    terms = []
    for index, spec in enumerate(specs):
        entry = lookup(LOSSES, spec.loss, "loss")
        if entry.classification_only and agnostic:
            raise ConfigError(f"objective {objective_cfg.name}: {spec.loss} contrasts examples by their task labels, "
                              "which raw text does not have: use it in setting=task_specific")
        if entry.classification_only and regression:
            raise ConfigError(
                f"objective {objective_cfg.name}: {spec.loss} contrasts examples of different classes and needs a "
                "classification task; this task is regression (STS-B): choose another objective or task"
            )
        if entry.mlm and not agnostic:
            raise ConfigError(f"objective {objective_cfg.name}: {spec.loss} reads MLM logits, which exist only in "
                              "setting=task_agnostic")
        if entry.mlm and not teacher_has_mlm_head:
            raise ConfigError(
                f"objective {objective_cfg.name} distils MLM logits ({spec.loss}) but this teacher has no MLM head "
                "(teacher.has_mlm_head=false): choose a teacher with one (bert_base_uncased, roberta_base) or an "
                "objective on attention or hidden states"
            )
        feature = spec.get("feature") or entry.features[0]
        if feature not in entry.features:
            raise ConfigError(
                f"objective {objective_cfg.name}, term {index}: loss {spec.loss} reads {', '.join(entry.features)}, "
                f"not {feature!r}"
            )
        if entry.same_heads and student_conf.num_attention_heads != teacher_conf.num_attention_heads:
            raise ConfigError(
                f"objective {objective_cfg.name}: {spec.loss} compares attention heads one to one, but the student "
                f"has {student_conf.num_attention_heads} heads and the teacher {teacher_conf.num_attention_heads}; "
                "use a student with as many heads, or objective=minilm_v2 (relations work for any head count)"
            )
        mapping = spec.get("mapping") or default_mapping
        depths = (student_conf.num_hidden_layers, teacher_conf.num_hidden_layers)
        pairs = [(LOGITS, LOGITS)] if feature == "logits" else resolve_pairs(mapping, init_layers, *depths)
        params = dict(OmegaConf.to_container(spec.params, resolve=True)) if spec.get("params") else {}
        if entry.heads_param:
            params.setdefault("num_heads", teacher_conf.num_attention_heads)
        weight = float(spec.get("weight", 1.0))
        terms.append(Term(spec.get("name") or spec.loss, spec.loss, feature, weight, pairs, params))
    names = [t.name for t in terms]
    if len(set(names)) != len(names):
        raise ConfigError(f"objective {objective_cfg.name}: term names {names} repeat; give each term a `name`")
    return terms


class Objective(nn.Module):
    """Computes every term from recorded student/teacher features; owns the learnable parts (projections, CRD)."""

    def __init__(self, terms: list[Term], student_conf, teacher_conf, train_labels: torch.Tensor | None = None,
                 seed: int = 0, *, recompute: bool = False, fused: bool = True):
        """`train_labels` [N]: the training labels by example number (for terms with per-example state).
        `fused`: attention-map terms through `score_maps` (gradient formed in the forward pass, no maps kept);
        otherwise through autograd on the reference functions."""
        super().__init__()
        self.terms = terms
        self.recompute = recompute
        self.fused = fused
        self.student_heads = student_conf.num_attention_heads
        self.teacher_heads = teacher_conf.num_attention_heads
        self.projections = nn.ModuleDict()
        self.loss_modules = nn.ModuleDict()
        for term in terms:
            entry = LOSSES[term.loss]
            if entry.projected:
                self.projections[term.name] = width_projection(student_conf.hidden_size, teacher_conf.hidden_size)
            if entry.module is not None:
                widths = [len(term.pairs) * conf.hidden_size for conf in (student_conf, teacher_conf)]
                self.loss_modules[term.name] = entry.module(*widths, train_labels, seed, **term.params)

    @property
    def uses_logits(self) -> bool:
        return any(term.feature == "logits" for term in self.terms)

    @property
    def uses_mlm(self) -> bool:
        return any(LOSSES[term.loss].mlm for term in self.terms)

    def needs(self, side: str) -> dict[int, set[str]]:
        """Raw features to record per layer for the student (`side="student"`) or the teacher."""
        position = 0 if side == "student" else 1
        wanted: dict[int, set[str]] = {}
        for term in self.terms:
            if term.feature == "logits":
                continue
            raw = FEATURES[term.feature][0]
            for pair in term.pairs:
                wanted.setdefault(pair[position], set()).update(raw)
        return wanted

    def last_layer(self, side: str) -> int | None:
        """Where that side's forward may stop: its last needed layer, or None when the logits are needed."""
        needs = self.needs(side)
        return None if self.uses_logits or not needs else max(needs)

    def _feature(self, records, layer, feature: str, heads: int) -> torch.Tensor:
        if feature == "logits":
            return records[LOGITS]
        return FEATURES[feature][1](records[layer], heads)

    def forward(self, student_records, teacher_records, batch: dict) -> dict[str, torch.Tensor]:
        """Per-term weighted losses (float32 scalars) and their sum under "total".

        Records map a layer (0 = embeddings) to its raw features, and LOGITS to the model's logits.
        Attention-map terms (`fused`) keep no maps for backward (`score_maps`). With `recompute`, another
        token-level term keeps only the raw features for the backward pass: each layer pair's loss intermediates
        are recomputed then, one pair at a time (activation checkpointing), at the cost of evaluating it twice.
        """
        losses: dict[str, torch.Tensor] = {}
        for term in self.terms:
            if term.name in self.loss_modules:  # one call on all mapped layers, concatenated (CRD)
                pairs = [self._pair(term, student_records, teacher_records, s, t) for s, t in term.pairs]
                student_all = torch.cat([s for s, _ in pairs], dim=-1)
                teacher_all = torch.cat([t for _, t in pairs], dim=-1)
                value = self.loss_modules[term.name](student_all, teacher_all, batch["example"], batch["labels"])
            else:
                recompute = self.recompute and term.feature in TOKEN_LEVEL and not self._fused(term)
                value = sum(
                    checkpoint(self._pair_loss, term, student_records, teacher_records, s, t, batch, use_reentrant=False)
                    if recompute else self._pair_loss(term, student_records, teacher_records, s, t, batch)
                    for s, t in term.pairs
                )
            losses[term.name] = term.weight * value
        losses["total"] = sum(losses.values())
        return losses

    def _pair(self, term: Term, student_records, teacher_records, s: int, t: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The term's (student, teacher) features at one layer pair, the student's projected when it has W_h."""
        student = self._feature(student_records, s, term.feature, self.student_heads)
        teacher = self._feature(teacher_records, t, term.feature, self.teacher_heads)
        if term.name in self.projections:
            student = self.projections[term.name](student)
        return student, teacher

    def _fused(self, term: Term) -> bool:
        return self.fused and LOSSES[term.loss].score_map is not None

    def _pair_loss(self, term: Term, student_records, teacher_records, s: int, t: int, batch: dict) -> torch.Tensor:
        if self._fused(term):
            raw = FEATURES[term.feature][0]  # the maps A B^T: q k^T, or a projection's self-relation x x^T
            a, b = raw if len(raw) == 2 else raw * 2
            student, teacher = student_records[s], teacher_records[t]
            heads = term.params["num_heads"] if LOSSES[term.loss].heads_param else self.student_heads
            return score_map_loss(LOSSES[term.loss].score_map, (student[a], student[b]), (teacher[a], teacher[b]),
                                  heads, batch["attention_mask"])
        kwargs = dict(term.params)
        if term.feature in TOKEN_LEVEL:
            kwargs["mask"] = batch["attention_mask"]
        if LOSSES[term.loss].takes_labels:
            kwargs["labels"] = batch["labels"]
        return LOSSES[term.loss].fn(*self._pair(term, student_records, teacher_records, s, t), **kwargs)


def computation(trainer: DictConfig) -> dict:
    """The trainer's settings of how an Objective computes (not what): its keyword arguments."""
    return {"recompute": trainer.recompute_losses, "fused": trainer.fused_losses}


def width_projection(student_width: int, teacher_width: int) -> nn.Linear:
    """Learnable W_h; the identity at start when the widths match (so a teacher-initialised student starts aligned)."""
    projection = nn.Linear(student_width, teacher_width)
    if student_width == teacher_width:
        with torch.no_grad():
            projection.weight.copy_(torch.eye(student_width))
            projection.bias.zero_()
    return projection
