"""Every config key is declared once, with its rule, default and help: the groups' values are
checked against the declarations, a loss declares its parameters' rules, and docs/keys.md is
written from the declarations."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from kdbench.errors import ConfigError
from kdbench.objectives.loss_entry import LossEntry
from kdbench.objectives.losses import LOSSES, hid_mse
from kdbench.planning.declared import check_declared
from kdbench.planning.group_keys import declaration_at, rule_for
from kdbench.planning.hydra_config import config_dir, group_options
from kdbench.planning.keys import reference
from kdbench.planning.plan import make_plan
from kdbench.planning.rules import COUNT, NON_NEGATIVE, key
from kdbench.planning.specs import ShapeSpec
from kdbench.planning.stage_specs import OptimizerSpec
from tests.helpers import compose_config, tiny_overrides

ROOT = Path(__file__).resolve().parents[2]
NEEDED = {"init=layers": ["init.layers=[2,4]"]}  # what an option leaves to the user


def test_the_key_reference_is_what_the_declarations_write():
    assert (ROOT / "docs" / "keys.md").read_text() == reference(), (
        "docs/keys.md is stale: python -m kdbench.planning.keys > docs/keys.md"
    )


def test_every_key_of_every_option_and_preset_is_declared():
    groups = sorted(p.name for p in config_dir().iterdir() if p.is_dir() and p.name != "hydra")
    choices = [
        [f"{group}={option}", *NEEDED.get(f"{group}={option}", [])]
        for group in groups
        if group != "experiment"
        for option in group_options(group)
    ]
    choices += [[f"+experiment={preset}"] for preset in group_options("experiment")]
    for overrides in choices:
        cfg = OmegaConf.to_container(compose_config(overrides), resolve=False)
        for group in set(groups) - {"experiment"}:
            check_declared(_unresolved(cfg[group]), declaration_at(group), group)


def _unresolved(values):
    """Values with what a run resolves later (an interpolation, a `???`) left out: the keys are
    what this test checks."""
    if isinstance(values, dict):
        return {k: _unresolved(v) for k, v in values.items() if not _later(v)}
    if isinstance(values, list):
        return [_unresolved(v) for v in values if not _later(v)]
    return values


def _later(value) -> bool:
    return isinstance(value, str) and (value.startswith("${") or value == "???")


@dataclass(frozen=True, kw_only=True)
class Toy:
    width: int = key(COUNT, help="a count")
    shape: ShapeSpec | None = key(ShapeSpec, None, help="a nested group, or null")
    per_task: dict | None = key(COUNT, None, each=True, help="{task: count}")


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"width": 0}, "toy.width=0 must be a positive integer"),
        (
            {"widht": 2},
            "toy has no key widht; did you mean toy.width? valid keys: per_task, shape,",
        ),
        ({"colour": 2}, "toy has no key colour; valid keys: per_task, shape, width"),
        ({"shape": {"num_layers": -1}}, "toy.shape.num_layers=-1 must be a positive integer"),
        ({"shape": 3}, "toy.shape=3 must be a mapping of name, num_layers, hidden_size, "),
        ({"per_task": {"rte": 2, "sst2": 1.5}}, "toy.per_task.sst2=1.5 must be a positive integer"),
        ({"per_task": 4}, "toy.per_task=4 must be a list or a mapping, each entry a positive"),
    ],
)
def test_a_value_outside_its_declaration_is_refused_naming_it(values, message):
    with pytest.raises(ConfigError) as refused:
        check_declared(values, Toy, "toy")
    assert str(refused.value).startswith(message) and "\n" not in str(refused.value)


def test_declared_values_pass_and_a_null_nested_group_needs_no_keys():
    values = {"width": 2, "shape": None, "per_task": {"rte": 3}}
    assert check_declared(values, Toy, "toy") == values


def test_a_path_finds_its_rule_through_nested_groups_and_entries():
    assert rule_for("objective.terms.3.weight") is rule_for(
        "objective.terms_task_agnostic.*.weight"
    )
    assert rule_for("teacher.shape.num_heads") is COUNT
    assert declaration_at("augment.mlm_shape") is ShapeSpec
    assert (
        rule_for("stages.finetune.optimizer.warmup_ratio_per_task.qqp").text == "a number in [0, 1)"
    )
    assert declaration_at("stages.intermediate.optimizer") is OptimizerSpec
    assert rule_for("task.nothing") is None and rule_for("objective.terms.0.params.beta") is None


def beta_mse(student_hidden, teacher_hidden, mask=None, *, beta: float = 0.5, passes: int = 1):
    """A loss made for this test: hid_mse scaled by beta."""
    return beta * passes * hid_mse(student_hidden, teacher_hidden, mask)


@pytest.fixture
def beta_loss(monkeypatch):
    """A new loss in the registry: `beta` declared non-negative, `passes` by its default alone."""
    entry = LossEntry(beta_mse, ("hidden", "cls"), projected=True, rules={"beta": NON_NEGATIVE})
    monkeypatch.setitem(LOSSES, "beta_mse", entry)


def plan_with_params(params: dict, tiny_glue, tmp_path):
    cfg = compose_config(tiny_overrides(tiny_glue, tmp_path / "run"))
    cfg.objective.terms = [{"loss": "beta_mse", "feature": "hidden", "params": params}]
    return make_plan(cfg)


def test_a_new_loss_s_parameters_are_planned_with_it(beta_loss, tiny_glue, tmp_path):
    plan = plan_with_params({"beta": 0.25, "passes": 2}, tiny_glue, tmp_path)
    assert [(term.loss, term.params) for term in plan.terms] == [
        ("beta_mse", {"beta": 0.25, "passes": 2})
    ]
    s, t = torch.ones(2, 3, 4), torch.zeros(2, 3, 4)
    assert LOSSES["beta_mse"].fn(s, t, **plan.terms[0].params) == 0.5


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"beta": -1}, "objective.terms.0.params.beta=-1 must be a number >= 0"),
        ({"beta": "high"}, "objective.terms.0.params.beta='high' must be a number >= 0"),
        ({"passes": 1.5}, "objective.terms.0.params.passes=1.5 must be an integer"),
        ({"passes": True}, "objective.terms.0.params.passes=true must be an integer"),
    ],
)
def test_a_bad_parameter_of_a_new_loss_is_refused_when_planned(
    beta_loss, tiny_glue, tmp_path, params, message
):
    """Refused by make_plan, which trains nothing: before the teacher's fine-tuning."""
    with pytest.raises(ConfigError) as refused:
        plan_with_params(params, tiny_glue, tmp_path)
    assert str(refused.value) == message


def test_every_loss_parameter_has_a_rule():
    assert {
        (loss, name)
        for loss, entry in LOSSES.items()
        for name, rule in entry.param_rules.items()
        if rule is None
    } == set()


def test_a_rule_for_a_parameter_the_loss_lacks_is_refused():
    with pytest.raises(TypeError, match="beta_mse has no parameter gamma"):
        LossEntry(beta_mse, ("hidden",), rules={"gamma": NON_NEGATIVE})
