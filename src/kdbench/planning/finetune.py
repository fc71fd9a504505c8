"""The fine-tune plan's own parts: a distilled student alone, no teacher and no objective.

Fine-tuning starts from the saved student's weights (its init is `pretrained` from
`setting.student_path`), and its chain is that student's, then the task it is fine-tuned on.
"""

from __future__ import annotations

from omegaconf import DictConfig

from kdbench.errors import ConfigError
from kdbench.models.hub import saved_config
from kdbench.planning.groups import check_positions
from kdbench.planning.paths import local_path
from kdbench.planning.specs import InitSpec, TaskSpec
from kdbench.planning.trainer_specs import TrainerSpec
from kdbench.records.record import chain_of


def finetune_parts(cfg: DictConfig, trainer: TrainerSpec, task: TaskSpec) -> dict:
    """The `Plan` fields of setting=finetune beyond those every setting has."""
    student_path = local_path(cfg.setting.student_path)
    if not (student_path / "config.json").is_file():
        raise ConfigError(
            f"setting.student_path={cfg.setting.student_path} is not a saved model "
            "(no config.json): give the student/ folder of a task-agnostic run"
        )
    student_conf = saved_config(student_path, "a distilled student")
    check_positions(student_conf, trainer, None)
    return dict(
        init=InitSpec("pretrained", None, path=student_path),
        terms=[],
        batches=None,
        teacher_conf=None,
        student_conf=student_conf,
        student_path=student_path,
        chain=(*chain_of(student_path, "student"), f"fine-tuned on {task.name}"),
    )
