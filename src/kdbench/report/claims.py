"""The paper's conclusions as data: each a statement of Wang et al. (2023) and the comparisons it
asserts.

A :class:`Claim` is a statement of the paper (Section 5, the table captions, the abstract) and the
comparisons it asserts. An :class:`Assertion` compares two objectives at one paper init or two paper
inits of one objective: ``a > b``, ``a ~ b`` (equivalent within the claim's margin) or ``a != b``
(significantly different, either way). An :class:`Interaction` compares how much a change of init
moves two objectives: a difference of differences or a contrast of magnitudes, ``< 0``.
:mod:`kdbench.report.verdicts` judges them from the runs; :mod:`kdbench.report.claims_md` writes
``claims.md``.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

GREATER, TIE, DIFFER, LESS = ">", "~", "!=", "<"
# A claimed tie's default margin, in examples of each task's dev set. A gap of at most 4 dev
# examples is a tie: on SST-2's 872 examples that is 0.46 points, the largest gap the paper itself
# calls a tie (Table 1: 0.0-0.5 points in Avg); counted in examples, it follows each dev set's
# resolution (RTE's 277: 1.44 points; QNLI's 5463: 0.07).
TIE_EXAMPLES = 4
DIFFERENCE, MAGNITUDE = "difference", "magnitude"  # the kinds of an interaction

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
class Interaction:
    """How a change of init moves objective ``a`` against ``b``. Each objective's init effect is d =
    its score at paper init ``lower`` minus its score at ``upper``, paired by (task, seed) over the
    seeds all four run sets share. Kind ``difference`` asserts d_a - d_b < 0 (``a`` gains less from
    ``lower``); kind ``magnitude`` asserts |d_a| - |d_b| < 0 (``a`` moves less, either way)."""

    kind: str
    a: str
    b: str
    lower: str
    upper: str
    relation: str = LESS

    def runs(self) -> tuple[tuple[str, str], ...]:
        """The four (objective, paper init) run sets it compares."""
        return tuple((o, i) for o in (self.a, self.b) for i in (self.lower, self.upper))

    def label(self) -> str:
        effect = {o: f"{o}: {self.lower} - {self.upper}" for o in (self.a, self.b)}
        if self.kind == MAGNITUDE:
            return f"|{effect[self.a]}| {self.relation} |{effect[self.b]}|"
        return f"({effect[self.a]}) - ({effect[self.b]}) {self.relation} 0"


@dataclass(frozen=True)
class Claim:
    id: str
    table: int
    statement: str  # the paper's words (or their gist)
    tested_as: str  # how the assertions read the statement
    assertions: tuple[Assertion | Interaction, ...]
    # A claimed tie's margin: this many examples of each task's dev set (kdbench.report.margins),
    # unless `margin` states one in score points.
    tie_examples: int = TIE_EXAMPLES
    margin: float | None = None


def _greater(factor: str, fixed: str, winners, losers) -> tuple[Assertion, ...]:
    return tuple(Assertion(factor, fixed, a, b, GREATER) for a in winners for b in losers if a != b)


def _ties_else_differ(factor: str, fixed: str, levels, ties) -> tuple[Assertion, ...]:
    """Every pair of ``levels`` of ``factor`` at ``fixed``: the ``ties`` tied, the rest
    different."""
    tied = {frozenset(pair) for pair in ties}
    return tuple(
        Assertion(factor, fixed, a, b, TIE if {a, b} in tied else DIFFER)
        for a, b in itertools.combinations(levels, 2)
    )


def _interactions(kind: str) -> tuple[Interaction, ...]:
    """Each Table 3 attention objective against each non-attention one, init 1,2,3 against
    4,8,12."""
    return tuple(
        Interaction(kind, attention, other, BOTTOM, EVERY_KTH)
        for attention in ("att_kl", "att_mse")
        for other in NON_ATTENTION
    )


_T1_TIES = (
    ("att_kl", "att_mse"),
    ("att_kl", "att_kl+hid_seq"),
    ("att_kl", "att_mse+hid_seq"),
    ("att_mse", "att_mse+hid_seq"),
)
_T3_TIES = ((SPREAD, BOTTOM),)
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
        "at paper init 4,8,12, the four named pairs are equivalent (~: TOST within the margin, "
        f"+-{TIE_EXAMPLES} dev examples of each task) and every other pair of the nine objectives "
        "differs significantly, in either direction (!=; which side wins is T1.attention_best's "
        "question)",
        _ties_else_differ("objective", EVERY_KTH, TABLE_DESIGNS[1][0], _T1_TIES),
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
        "for att_kl and att_mse: paper init 1,8,12 ~ 1,2,3 (TOST within the margin, "
        f"+-{TIE_EXAMPLES} dev examples of each task) and 4,8,12 != each of them (either "
        "direction), tasks pooled; the other objectives' pairs are T3.lower_layers_help's",
        tuple(
            assertion
            for objective in ("att_kl", "att_mse")
            for assertion in _ties_else_differ("init", objective, TABLE_DESIGNS[3][1], _T3_TIES)
        ),
    ),
    Claim(
        "T3.attention_benefits_less",
        3,
        "Table 3's caption (gist): initialising from lower teacher layers improves vanilla KD and "
        "hidden states transfer, while attention transfer benefits less.",
        "for att_kl and att_mse against each non-attention objective, with d = score at paper "
        "init 1,2,3 - score at 4,8,12 paired by (task, seed): d_attention - d_other < 0 (a "
        "difference of differences), tasks pooled",
        _interactions(DIFFERENCE),
    ),
    Claim(
        "T3.attention_consistent_across_inits",
        3,
        "Attention transfer behaves consistently under different initialisation settings (the "
        "abstract; gist).",
        "for att_kl and att_mse against each non-attention objective, with d = score at paper init "
        "1,2,3 - score at 4,8,12: |d_attention| - |d_other| < 0 (a contrast of magnitudes, each "
        "effect signed by its observed mean), tasks pooled",
        _interactions(MAGNITUDE),
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
