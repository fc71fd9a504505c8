"""An objective = weighted loss terms (`term_specs.Term`), each applied to mapped (student, teacher)
layer pairs.

A term's loss is summed over its layer pairs (TinyBERT's and the paper's convention) and weighted;
learnable parts (projections, CRD's heads) live here, on the student side, and are trained with the
student.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from kdbench.data.masking import MASKED_SHARE
from kdbench.errors import ConfigError
from kdbench.objectives.chains import compiled_chains
from kdbench.objectives.features import FEATURES, token_level
from kdbench.objectives.losses import LOSSES
from kdbench.objectives.tensors import LOGITS
from kdbench.objectives.term_specs import Term
from kdbench.records.record import PROJECTIONS_FILE


class Objective(nn.Module):
    """Computes every term from recorded student/teacher features; owns the learnable parts
    (projections, CRD)."""

    def __init__(
        self,
        terms: list[Term],
        student_conf,
        teacher_conf,
        train_labels: torch.Tensor | None = None,
        seed: int = 0,
        *,
        recompute: bool = False,
        fused: bool = True,
        padding: str = "masked",
        compile_backend: str | None = None,
    ):
        """`train_labels` [N]: the training labels by example number (for terms with per-example
        state). `fused`: losses with a fused form (`LossEntry.fused`) through it (gradient formed in
        the forward pass, no score maps kept); otherwise through autograd on the reference
        functions. `recompute`: see `forward`. `padding`: the stage's, given to every loss that
        takes it (`LossEntry.takes_padding`). `compile_backend`: the chunked losses' chains run
        compiled by it (`chains.compiled_chains`, as `trainer.compile` asks), None: eagerly."""
        super().__init__()
        self.terms = terms
        self.recompute = recompute
        self.fused = fused
        self.padding = padding
        self.compile_backend = compile_backend
        self.student_heads = student_conf.num_attention_heads
        self.teacher_heads = teacher_conf.num_attention_heads
        self.projections = nn.ModuleDict()
        self.loss_modules = nn.ModuleDict()
        for term in terms:
            entry = LOSSES[term.loss]
            if term.projected:
                self.projections[term.name] = width_projection(
                    student_conf.hidden_size, teacher_conf.hidden_size
                )
            if entry.module:
                widths = [
                    len(layers) * conf.hidden_size
                    for layers, conf in zip(term.sides(), (student_conf, teacher_conf))
                ]
                self.loss_modules[term.name] = entry.fn(*widths, train_labels, seed, **term.params)

    @property
    def uses_logits(self) -> bool:
        return any(term.feature == LOGITS for term in self.terms)

    @property
    def reads_padding(self) -> bool:
        """Whether a term reads features at padded positions, where the teacher's features table
        holds zeros, not the teacher's values: a token-level term whose `padding` (its
        `params.padding`, or the stage's for a loss that takes it) is not masked."""
        return any(
            token_level(term.feature) and self.term_padding(term) != "masked" for term in self.terms
        )

    def term_padding(self, term: Term) -> str:
        """How the term's loss counts padded positions: the stage's `padding` for a loss that takes
        it (`LossEntry.takes_padding`), else the term's `params.padding` (masked by default)."""
        if LOSSES[term.loss].takes_padding:
            return self.padding
        return term.params.get("padding", "masked")

    @property
    def logit_positions(self) -> str:
        """Where the MLM logits are read: every attended token when a term wants it, else masked."""
        return "attended" if any(term.positions == "attended" for term in self.terms) else "masked"

    def needs(self, side: str) -> dict[int, set[str]]:
        """Raw features to record per layer for the student (`side="student"`) or the teacher."""
        position = 0 if side == "student" else 1
        wanted: dict[int, set[str]] = {}
        for term in self.terms:
            if term.feature == LOGITS:
                continue
            for layer in term.sides()[position]:
                wanted.setdefault(layer, set()).update(FEATURES[term.feature].raw)
        return wanted

    def last_layer(self, side: str) -> int | None:
        """Where that side's forward may stop: its last needed layer, or None when the logits are
        needed."""
        needs = self.needs(side)
        return None if self.uses_logits or not needs else max(needs)

    def forward(self, student_records, teacher_records, batch: dict) -> dict[str, torch.Tensor]:
        """Per-term weighted losses (float32 scalars) and their sum under "total".

        Records map a layer (0 = embeddings) to its raw features, and LOGITS to the model's logits.
        Terms computed by their fused form keep no score maps for backward (`fused`). With
        `recompute`, another token-level term keeps only the raw features for the backward pass:
        each layer pair's loss intermediates are recomputed then, one pair at a time (activation
        checkpointing), at the cost of evaluating it twice.
        """
        losses: dict[str, torch.Tensor] = {}
        with compiled_chains(self.compile_backend):
            for term in self.terms:
                loss = self._term_loss(term, student_records, teacher_records, batch)
                if reads_masked_positions(term) and MASKED_SHARE in batch:
                    loss = loss * batch[MASKED_SHARE]
                losses[term.name] = term.weight * loss
        losses["total"] = sum(losses.values())
        return losses

    def _term_loss(self, term: Term, student_records, teacher_records, batch: dict) -> torch.Tensor:
        """The term's unweighted loss: summed over its layer pairs, or one module call on each
        side's features concatenated in layer order (CRD)."""
        if term.name in self.loss_modules:
            student_layers, teacher_layers = term.sides()
            student_all = torch.cat(
                [self._feature(term, student_records, s, "student") for s in student_layers], -1
            )
            teacher_all = torch.cat(
                [self._feature(term, teacher_records, t, "teacher") for t in teacher_layers], -1
            )
            return self.loss_modules[term.name](
                student_all, teacher_all, batch["example"], batch["labels"]
            )
        fused = self._runs_fused(term)
        pair_loss = self._fused_pair_loss if fused else self._reference_pair_loss
        recompute = self.recompute and token_level(term.feature) and not fused
        return sum(
            checkpoint(
                pair_loss, term, student_records, teacher_records, s, t, batch, use_reentrant=False
            )
            if recompute
            else pair_loss(term, student_records, teacher_records, s, t, batch)
            for s, t in term.pairs
        )

    def _runs_fused(self, term: Term) -> bool:
        """The fused forms scale each side by its own head size; a term scaled otherwise is not."""
        own_scale = term.params.get("scale_by", "own") == "own"
        return self.fused and LOSSES[term.loss].fused is not None and own_scale

    def _fused_pair_loss(
        self, term: Term, student_records, teacher_records, s: int, t: int, batch: dict
    ) -> torch.Tensor:
        """The term's loss at one layer pair by its fused form, on the raw projections of the score
        maps."""
        entry = LOSSES[term.loss]
        a, b = _score_map_factors(term.feature)
        student, teacher = student_records[s], teacher_records[t]
        heads = term.params["num_heads"] if entry.takes_num_heads else self.student_heads
        keywords = {name: term.params[name] for name in entry.fused_keywords if name in term.params}
        if entry.takes_padding:
            keywords["padding"] = self.padding
        return entry.fused(
            (student[a], student[b]),
            (teacher[a], teacher[b]),
            heads,
            batch["attention_mask"],
            **keywords,
        )

    def _reference_pair_loss(
        self, term: Term, student_records, teacher_records, s: int, t: int, batch: dict
    ) -> torch.Tensor:
        """The term's loss at one layer pair by the reference function, on the derived features."""
        entry = LOSSES[term.loss]
        kwargs = dict(term.params)
        if token_level(term.feature):
            kwargs["mask"] = batch["attention_mask"]
        if entry.takes_labels:
            kwargs["labels"] = batch["labels"]
        if entry.takes_padding:
            kwargs["padding"] = self.padding
        features = self._pair_features(term, student_records, teacher_records, s, t)
        if term.feature == LOGITS and term.positions != self.logit_positions:  # the masked ones
            keep = batch["masked_in_attended"]
            features = tuple(feature.index_select(0, keep) for feature in features)
        return entry.fn(*features, **kwargs)

    def _pair_features(
        self, term: Term, student_records, teacher_records, s: int, t: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The term's (student, teacher) features at one layer pair, the student's projected when it
        has W_h."""
        return (
            self._feature(term, student_records, s, "student"),
            self._feature(term, teacher_records, t, "teacher"),
        )

    def _feature(self, term: Term, records, layer, side: str) -> torch.Tensor:
        """The term's feature at a layer of one side, the student's projected when it has W_h."""
        if side == "teacher":
            return _read_feature(records, layer, term.feature, self.teacher_heads)
        student = _read_feature(records, layer, term.feature, self.student_heads)
        if term.name in self.projections:
            student = self.projections[term.name](student)
        return student


def reads_masked_positions(term: Term) -> bool:
    """Whether the term is a mean over the batch's masked positions (an MLM loss read there)."""
    return LOSSES[term.loss].mlm and term.positions == "masked"


def _read_feature(records, layer, feature: str, heads: int) -> torch.Tensor:
    if feature == LOGITS:
        return records[LOGITS]
    return FEATURES[feature].derive(records[layer], heads)


def _score_map_factors(feature: str) -> tuple[str, str]:
    """The raw projections (A, B) whose per-head products A B^T give the feature's score maps: q k^T
    for two raw features, otherwise the one projection's self-relation x x^T."""
    raw = FEATURES[feature].raw
    return raw if len(raw) == 2 else raw * 2


def carry_projections(objective: Objective, folder: Path) -> None:
    """Start the objective's W_e/W_h from those a previous stage saved with its student in `folder`
    (TinyBERT's task stage goes on with the general stage's projection); every projection of this
    objective must be there."""
    path = folder / PROJECTIONS_FILE
    if not path.is_file():
        raise ConfigError(
            f"init.carry_projections=true but {folder} has no {PROJECTIONS_FILE}: "
            "give a student saved by a task-agnostic run of an objective with "
            "projections, or init.carry_projections=false"
        )
    saved = torch.load(path, map_location="cpu", weights_only=True)
    wanted = objective.projections.state_dict()
    if missing := sorted(set(wanted) - set(saved)):
        raise ConfigError(
            f"{path} lacks the projection {missing[0]} this objective learns "
            f"({', '.join(sorted(saved))} saved): distil with the same objective, or "
            "init.carry_projections=false"
        )
    objective.projections.load_state_dict({key: saved[key] for key in wanted})


def width_projection(student_width: int, teacher_width: int) -> nn.Linear:
    """Learnable W_h; the identity at start when the widths match (so a teacher-initialised student
    starts aligned)."""
    projection = nn.Linear(student_width, teacher_width)
    if student_width == teacher_width:
        with torch.no_grad():
            projection.weight.copy_(torch.eye(student_width))
            projection.bias.zero_()
    return projection
