"""The paper's conclusions as data: each a statement of Wang et al. (2023) and the comparisons it
asserts.

A :class:`Claim` is a statement of the paper (Section 5, the table captions) and the comparisons it
asserts: ``a > b``, ``a ~ b`` (not significantly different) or ``a != b`` (significantly different,
either way), between two objectives at one paper init or two paper inits of one objective.
:mod:`kdbench.report.verdicts` judges them from the runs; :mod:`kdbench.report.claims_md` writes
``claims.md``.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

GREATER, TIE, DIFFER = ">", "~", "!="
# The default margin of a claimed tie, in score points (accuracy / F1 / MCC x 100): the paper's four
# named ties in Table 1 differ by 0.0-0.5 points in Avg and its per-cell seed std averages 0.39
# points, so 1 point is twice the largest gap it calls a tie and about 2.5 of its seed stds; a gap
# under 1 point is also below what changes the choice of an objective in practice.
TIE_MARGIN = 1.0

ATTENTION = ("att_mse", "att_mse+hid_seq", "att_kl", "att_kl+hid_seq", "att_kl+val_kl")
NON_ATTENTION = ("vanilla_kd", "hid_cls_contrast", "hid_cls", "hid_seq")
EVERY_KTH, SPREAD, BOTTOM = "4,8,12", "1,8,12", "1,2,3"
# Each paper table's design: its objectives (kdbench names) and the paper's inits.
TABLE_DESIGNS = {
    1: (NON_ATTENTION + ATTENTION, (EVERY_KTH,)),
    2: (("vanilla_kd", "hid_cls", "hid_seq") + ATTENTION, ("random",)),
    3: (NON_ATTENTION + ("att_kl", "att_mse"), (EVERY_KTH, SPREAD, BOTTOM)),
    4: (("vanilla_kd", "hid_cls", "hid_seq", "att_mse"), ("random", "first 6")),
}


@dataclass(frozen=True)
class Assertion:
    """One asserted comparison: objectives ``a`` and ``b`` at paper init ``fixed`` (factor
    ``objective``), or paper inits ``a`` and ``b`` of objective ``fixed`` (factor ``init``)."""

    factor: str
    fixed: str
    a: str
    b: str
    relation: str

    def runs(self) -> tuple[tuple[str, str], tuple[str, str]]:
        """The two (objective, paper init) run sets it compares."""
        if self.factor == "objective":
            return (self.a, self.fixed), (self.b, self.fixed)
        return (self.fixed, self.a), (self.fixed, self.b)

    def label(self) -> str:
        return f"{self.fixed}: {self.a} {self.relation} {self.b}"


@dataclass(frozen=True)
class Claim:
    id: str
    table: int
    statement: str  # the paper's words (or their gist)
    tested_as: str  # how the assertions read the statement
    assertions: tuple[Assertion, ...]
    margin: float = (
        TIE_MARGIN  # a claimed tie holds when the difference is shown within +-margin points
    )


def _greater(factor: str, fixed: str, winners, losers) -> tuple[Assertion, ...]:
    return tuple(Assertion(factor, fixed, a, b, GREATER) for a in winners for b in losers if a != b)


def _ties_else_differ(fixed: str, objectives, ties) -> tuple[Assertion, ...]:
    """Every pair of ``objectives`` at ``fixed``: the ``ties`` tied, the rest different."""
    tied = {frozenset(pair) for pair in ties}
    return tuple(
        Assertion("objective", fixed, a, b, TIE if {a, b} in tied else DIFFER)
        for a, b in itertools.combinations(objectives, 2)
    )


_T1_TIES = (
    ("att_kl", "att_mse"),
    ("att_kl", "att_kl+hid_seq"),
    ("att_kl", "att_mse+hid_seq"),
    ("att_mse", "att_mse+hid_seq"),
)
_LOWER_FIRST = ((BOTTOM, SPREAD), (SPREAD, EVERY_KTH), (BOTTOM, EVERY_KTH))
_T2_OTHERS = tuple(o for o in TABLE_DESIGNS[2][0] if o != "att_mse")
_T4_OTHERS = tuple(o for o in TABLE_DESIGNS[4][0] if o != "att_mse")

CLAIMS = (
    Claim(
        "T1.attention_best",
        1,
        "In the task-specific setting, attention transfer is the best choice with initialisation "
        "from every k-th teacher layer (Table 1: attention based objectives consistently "
        "outperform hidden states transfer and vanilla KD).",
        "at paper init 4,8,12, every attention objective > every non-attention objective, tasks "
        f"pooled ({len(ATTENTION) * len(NON_ATTENTION)} comparisons)",
        _greater("objective", EVERY_KTH, ATTENTION, NON_ATTENTION),
    ),
    Claim(
        "T1.attention_variants_tie",
        1,
        "For Table 1, all the pairs of objectives are statistically significant (p < 0.05) except "
        "four: (Att-KL, Att-MSE), (Att-KL, Att-KL + Hid-Seq), (Att-KL, Att-MSE + Hid-Seq), "
        "(Att-MSE, Att-MSE + Hid-Seq).",
        f"at paper init 4,8,12, the four named pairs are equivalent within +-{TIE_MARGIN} points "
        "(~) and every other pair of the nine objectives differs significantly, in either "
        "direction (!=; which side wins is T1.attention_best's question)",
        _ties_else_differ(EVERY_KTH, TABLE_DESIGNS[1][0], _T1_TIES),
    ),
    Claim(
        "T3.lower_layers_help",
        3,
        "The performance of vanilla KD and hidden states transfer was significantly improved when "
        "initialising from lower layers of the teacher; the three initialisation choices differ "
        "significantly.",
        "for vanilla_kd, hid_cls_contrast, hid_cls and hid_seq: paper init 1,2,3 > 1,8,12 > "
        "4,8,12, every pair, tasks pooled",
        tuple(
            Assertion("init", objective, a, b, GREATER)
            for objective in NON_ATTENTION
            for a, b in _LOWER_FIRST
        ),
    ),
    Claim(
        "T3.attention_robust_to_init",
        3,
        "All three initialisation choices are significantly different for all the objectives, "
        "except the pair (1,8,12, 1,2,3) for Att-KL and Att-MSE, which indicates the robustness of "
        "attention transfer.",
        f"for att_kl and att_mse: paper init 1,8,12 ~ 1,2,3 (equivalent within +-{TIE_MARGIN} "
        "points)",
        tuple(
            Assertion("init", objective, SPREAD, BOTTOM, TIE) for objective in ("att_kl", "att_mse")
        ),
    ),
    Claim(
        "T2.att_mse_best_agnostic",
        2,
        "In the task-agnostic setting (random init), Att-MSE performs the best among all the "
        "objectives.",
        "at paper init random, att_mse > every other objective of Table 2, over the tasks (each "
        "task's best fine-tuning grid point)",
        _greater("objective", "random", ("att_mse",), _T2_OTHERS),
    ),
    Claim(
        "T4.attention_best_both_inits",
        4,
        "Attention transfer performs the best in both initialisation settings (random weights and "
        "the first 6 teacher layers).",
        "at paper inits random and first 6, att_mse > vanilla_kd, hid_cls and hid_seq, over the "
        "tasks (each task's best fine-tuning grid point)",
        _greater("objective", "random", ("att_mse",), _T4_OTHERS)
        + _greater("objective", "first 6", ("att_mse",), _T4_OTHERS),
    ),
)
