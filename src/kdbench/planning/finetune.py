"""The fine-tune plan's own parts: a distilled student alone, no teacher and no objective.

Fine-tuning starts from the saved student's weights (its init is `pretrained` from
`setting.student_path`), and its chain is that student's, then the task it is fine-tuned on.
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from kdbench.errors import ConfigError
from kdbench.models.hub import saved_config
from kdbench.planning.groups import check_positions, logger_spec
from kdbench.planning.paths import local_path
from kdbench.planning.specs import InitSpec
from kdbench.records.record import RESULT_FILE, RunRecord, chain_of

MODEL_FIELDS = ("teacher", "student", "objective")  # what made the student
RECORD_FIELDS = (*MODEL_FIELDS, "init", "seed")


def finetune_parts(cfg: DictConfig, common: dict) -> dict:
    """The `Plan` fields of setting=finetune beyond those every setting has (`common`)."""
    if cfg.save_student:
        raise ConfigError(
            "save_student=true saves a distilled student, and setting=finetune distils none: it "
            "scores the student of setting.student_path on the task and saves no model; drop "
            "save_student=true"
        )
    student_path = local_path(cfg.setting.student_path)
    if not (student_path / "config.json").is_file():
        raise ConfigError(
            f"setting.student_path={cfg.setting.student_path} is not a saved model "
            "(no config.json): give the student/ folder of a task-agnostic run"
        )
    student_conf = saved_config(student_path, "a distilled student")
    check_positions(student_conf, common["trainer"], None)
    task = common["task"].name
    return dict(
        init=InitSpec("pretrained", None, path=student_path),
        terms=[],
        batches=None,
        teacher_conf=None,
        student_conf=student_conf,
        student_path=student_path,
        chain=(*chain_of(student_path, "student"), f"fine-tuned on {task}"),
        logger=logger_spec(
            cfg, (task, *student_design(student_path, student_conf), *grid_point(common))
        ),
    )


def distillation_record(student_path: Path, student_conf) -> dict:
    """What the run that wrote this student (its result.json beside student/) names it by; a
    task-agnostic run's record joins its tables. A student without a record is named by its shape
    and its chain's teacher (its objective unknown; none without a chain), never by the config
    groups a fine-tuning does not read."""
    record = RunRecord.read(student_path.parent / RESULT_FILE)
    if record is None:
        chain = chain_of(student_path, "student")
        distilled = len(chain) > 1
        return {
            "teacher": chain[0] if distilled else "none",
            "student": f"{student_conf.num_hidden_layers}x{student_conf.hidden_size}",
            "objective": "unknown" if distilled else "none",
        }
    named = {field: getattr(record, field) for field in RECORD_FIELDS}
    named = {field: value for field, value in named.items() if value is not None}
    if record.setting != "task_agnostic":  # its own seed and init: the fine-tuning's
        return {field: named[field] for field in MODEL_FIELDS if field in named}
    return named | {
        "setting": "task_agnostic",
        "stage": "finetune",  # so the task-agnostic tables read it
        "distilled_from": str((student_path.parent / "result.json").resolve()),
        "distillation_config": record.config,  # the report tells students' designs apart
    }


def student_design(student_path: Path, student_conf) -> tuple:
    """The distilled student as the run that made it names it (`distillation_record`): its
    objective and shape, then a task-agnostic run's init and seed, else its run folder's name."""
    made = distillation_record(student_path, student_conf)
    if "seed" not in made:
        return made.get("objective"), made.get("student"), student_path.parent.name
    return made.get("objective"), made.get("student"), made.get("init"), f"s{made['seed']}"


def grid_point(common: dict) -> tuple[str, str]:
    """The fine-tuning's learning rate and batch size, as its run's name gives them."""
    stage = common["stages"]["finetune"]
    return f"lr{stage.optimizer.lr:g}", f"bs{stage.batch_size}"
