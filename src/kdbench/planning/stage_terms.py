"""Each distillation stage's terms: the objective group's, or the stage's own objective's
(`stages.<stage>.objective`), built against both models and the task.

Both ways of naming an objective map its layers by one rule: the setting's mapping where it sets
one (task_agnostic: last), else the objective's own `mapping` (`init` unless an objective option or
a preset names another: `minilm_v2` and `distilbert` name `last`); a term's own `mapping` is over
both.
"""

from __future__ import annotations

from dataclasses import replace

from omegaconf import DictConfig, OmegaConf

from kdbench.errors import ConfigError
from kdbench.objectives.term_specs import Term, build_terms, check_padding, check_terms
from kdbench.planning.declared import with_defaults
from kdbench.planning.group_keys import StageObjectiveKeys
from kdbench.planning.groups import checked, container
from kdbench.planning.specs import TeacherSpec
from kdbench.planning.stage_specs import SETTING_STAGES, SUPERVISED


def setting_mapping(cfg: DictConfig):
    """The setting's layer mapping, over every objective's; None where it sets none."""
    mapping = cfg.setting.get("mapping")
    return container(mapping) if OmegaConf.is_config(mapping) else mapping


def objective_terms(cfg: DictConfig, init, confs, teacher: TeacherSpec, task) -> list[Term]:
    """The objective group's terms for this setting (`confs`: the student's and the teacher's model
    configs): raw text uses `terms_task_agnostic`."""
    values = checked(cfg.objective, "objective")  # both term lists, whichever this setting uses
    for listed in ("terms", "terms_task_agnostic"):
        check_terms(cfg.objective.name, f"objective.{listed}", values.get(listed) or [])
    agnostic = cfg.setting.name == "task_agnostic"
    terms = "terms_task_agnostic" if agnostic and values.get("terms_task_agnostic") else "terms"
    mapping, mapping_at = mapping_of(cfg, values["mapping"], "objective")
    where = (cfg.objective.name, f"objective.{terms}", mapping_at)
    return terms_of(where, values[terms], mapping, init, confs, teacher, task, agnostic)


def mapping_of(cfg: DictConfig, own, at: str) -> tuple:
    """The layer mapping of the objective at config path `at` (`own`: its `mapping`), the setting's
    over it, and the config key that gives it."""
    if setting := setting_mapping(cfg):
        return setting, "setting.mapping"
    return own, f"{at}.mapping"


def terms_of(
    where, specs, mapping, init, confs, teacher: TeacherSpec, task, agnostic
) -> list[Term]:
    """The terms of `specs` (`where`: the objective's name, the list's config path and the config
    path of `mapping`, the layer mapping of a term without its own)."""
    layers = None if init.layers is None else list(init.layers)
    return build_terms(
        where[0],
        specs,
        mapping,
        layers,
        *confs,
        regression=task.regression,
        agnostic=agnostic,
        teacher_has_mlm_head=teacher.has_mlm_head,
        at=where[1],
        mapping_at=where[2],
    )


def with_terms(cfg: DictConfig, stages: dict, terms: list[Term], init, confs, teacher, task):
    """The distillation stages with their terms: the objective group's where a stage names none,
    else its own (`stages.prediction.objective`: vanilla KD), mapped as the objective group's."""
    out = {}
    for name, stage in stages.items():
        if name in SUPERVISED:
            out[name] = stage
            continue
        own = terms
        if stage.objective is not None:
            at = f"stages.{name}.objective"
            if name in SETTING_STAGES["task_agnostic"]:
                raise ConfigError(
                    f"{at} is not read: a task-agnostic run distils with the objective group's "
                    "terms (objective=..., its terms_task_agnostic); drop it and choose the "
                    "objective with objective=..."
                )
            values = with_defaults(stage.objective, StageObjectiveKeys)  # checked with the stages
            check_terms(at, f"{at}.terms", values["terms"])
            if stage.runs and not values["terms"]:
                raise ConfigError(
                    f"{at}.terms is empty, so the stage would not train: give it terms, or "
                    f"skip it with stages.{name}.epochs=0 stages.{name}.steps=null"
                )
            mapping, mapping_at = mapping_of(cfg, values["mapping"], at)
            where = (at, f"{at}.terms", mapping_at)
            own = terms_of(where, values["terms"], mapping, init, confs, teacher, task, False)
        check_padding(f"stages.{name}", stage.padding, own)
        out[name] = replace(stage, terms=tuple(own))
    return out
