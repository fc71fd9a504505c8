"""The study's logic without training: checking a preset, finding completed students, building each
step's command, stopping at a failed step."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from kdbench import study
from kdbench.errors import ConfigError
from kdbench.planning import study_config


def write_record(
    run_dir: Path, *, status="completed", setting="task_agnostic", task=None, student=True, seed=1
) -> Path:
    run_dir.mkdir(parents=True)
    (run_dir / "result.json").write_text(
        json.dumps({"status": status, "setting": setting, "task": task, "seed": seed})
    )
    if student:
        (run_dir / "student").mkdir()
        (run_dir / "student" / "config.json").write_text("{}")
    return run_dir / "student"


def test_completed_students_are_the_saved_students_of_completed_distillations(tmp_path):
    wanted = {
        write_record(tmp_path / "objective=att_kl,seed=1"): 1,
        write_record(tmp_path / "objective=hid_seq,seed=2", seed=2): 2,
    }
    write_record(tmp_path / "objective=att_mse,seed=1", status="failed")
    write_record(tmp_path / "objective=hid_cls,seed=1", status="running")
    write_record(tmp_path / "objective=att_kl+val_kl,seed=1", student=False)
    write_record(
        tmp_path / "finetune" / "objective=att_kl,seed=1" / "task=rte,seed=1",
        setting="task_agnostic",
        task="rte",
        student=False,
    )  # a fine-tuning record: it has a task
    got = study_config.make_study("mini_table2", [f"hydra.sweep.dir={tmp_path}"], [])
    assert study.completed_students(got) == wanted


def test_the_jobs_a_study_names_are_the_folders_hydra_gives_them():
    """`job_folders` crosses the preset's sweep with the command line's (a key of both: the command
    line's values) as Hydra's basic sweeper does, and names each job as `hydra.sweep.subdir` does
    for that job composed alone."""
    from kdbench.planning.hydra_config import compose, register_resolvers

    register_resolvers()
    overrides = ["+experiment=mini_table3", "objective=att_kl,hid_seq", "data.train_limit=50"]
    got = study_config.job_folders(study_config.preset("mini_table3", []), overrides)
    assert len(got) == 2 * 3 * 4 == len(set(got))  # objectives x inits x seeds
    for objective, layers, seed in (("att_kl", "[1,4,6]", 3), ("hid_seq", "[2,4,6]", 1)):
        job = [overrides[0], overrides[2], "task=sst2", f"objective={objective}"]
        composed = compose([*job, f"init.layers={layers}", f"seed={seed}"], hydra_config=True)
        assert composed.hydra.sweep.subdir in got


def test_a_task_agnostic_preset_fine_tunes_with_its_own_grid_preset():
    got = study_config.make_study(
        "table2_agnostic",
        [
            "hydra/launcher=slurm",
            "hydra.launcher.partition=gpu",
            "stages.distillation.steps=10",
            "data.glue_dir=/data/glue",
        ],
        ["task=rte"],
    )
    assert (
        got.finetunes
        and got.sweep_dir == Path("multirun/table2_agnostic")
        and got.out == Path("results/table2_agnostic")
    )
    # where and how jobs run goes to every step; the distillation's recipe does not reach the grid
    assert got.finetune_overrides == (
        "hydra/launcher=slurm",
        "hydra.launcher.partition=gpu",
        "data.glue_dir=/data/glue",
        "task=rte",
    )


def test_finetune_sets_a_key_of_the_launcher_the_distillations_choose():
    """docs/studies.md: the grids' jobs are short, so `--finetune` shortens the launcher's time
    limit that `hydra/launcher=slurm` (shared with the grids) brings."""
    got = study_config.make_study(
        "table2_agnostic",
        ["hydra/launcher=slurm", "hydra.launcher.partition=gpu"],
        ["hydra.launcher.timeout_min=60"],
    )
    assert got.finetune_overrides[-1] == "hydra.launcher.timeout_min=60"
    assert (got.next_cfg.hydra.launcher.timeout_min, got.cfg.hydra.launcher.timeout_min) == (
        60,
        study_config.preset("table2_agnostic", ["hydra/launcher=slurm"]).hydra.launcher.timeout_min,
    )


def test_the_assistants_corpus_reaches_its_students_distillation_not_a_fine_tuning_grid():
    corpus = ["corpus.path=/data/wiki", "corpus.seq_len=64"]
    chain = study_config.make_study("mini_minilm_ta", corpus, [])
    assert chain.finetune_overrides == tuple(corpus)
    assert (chain.next_cfg.corpus.path, chain.next_cfg.corpus.seq_len) == ("/data/wiki", 64)
    assert study_config.make_study("mini_table2", corpus, []).finetune_overrides == ()


def test_commands_of_the_three_steps(tmp_path):
    got = study_config.make_study(
        "mini_table2",
        [f"hydra.sweep.dir={tmp_path}", "objective=att_kl,hid_seq"],
        ["task=rte"],
        out=tmp_path / "tables",
    )
    assert got.sweep_dir == tmp_path
    assert study.distill_command(got) == [
        sys.executable,
        "-m",
        "kdbench.run",
        "-m",
        "+experiment=mini_table2",
        f"hydra.sweep.dir='{tmp_path}'",
        "objective=att_kl,hid_seq",
    ]
    student = tmp_path / "objective=att_kl,seed=1" / "student"
    grid_dir = tmp_path / "finetune" / "objective=att_kl,seed=1"
    assert study.finetune_command(got, student, 1) == [
        sys.executable,
        "-m",
        "kdbench.run",
        "-m",
        "+experiment=mini_table2_finetune",
        f"hydra.sweep.dir='{grid_dir}'",
        f"setting.student_path='{student.resolve()}'",
        "task=rte",
    ]
    assert study.report_command(got) == [
        sys.executable,
        "-m",
        "kdbench.report",
        str(tmp_path),
        "--out",
        str(tmp_path / "tables"),
        "--paper",
    ]


def test_paths_are_single_override_values_whatever_they_hold():
    from hydra.core.override_parser.overrides_parser import OverridesParser

    path = Path("/runs/it's/objective=att_kl,seed=1/student")
    (override,) = OverridesParser.create().parse_overrides(
        [f"setting.student_path={study.quoted(path)}"]
    )
    assert not override.is_sweep_override() and override.value() == str(path)


def test_a_quoted_sweep_dir_is_read_as_hydra_reads_it():
    got = study_config.make_study("mini_table1", ["hydra.sweep.dir='runs/a=1,b'"], [])
    assert (
        got.sweep_dir == Path("runs/a=1,b")
        and study.distill_command(got)[5] == "hydra.sweep.dir='runs/a=1,b'"
    )


def test_a_task_specific_preset_distils_and_reports_only():
    got = study_config.make_study("mini_table1", [], [])
    assert not got.finetunes and got.sweep_dir == Path("multirun/mini_table1")


def test_a_preset_without_a_fixed_sweep_dir_gets_one_a_rerun_finds_again():
    assert study_config.make_study("smoke_sweep", [], []).sweep_dir == Path("multirun/smoke_sweep")


@pytest.mark.parametrize(
    ("name", "overrides", "finetune", "message"),
    [
        ("table9", [], [], "unknown experiment 'table9'"),
        ("table2_agnostic_finetune", [], [], "is a fine-tuning grid .* study of table2_agnostic$"),
        ("finetune_grid", [], [], "is a fine-tuning grid .* setting.student_path=DIR$"),
        (
            "mini_table1",
            [],
            ["task=rte"],
            "mini_table1 is task_specific, its study fine-tunes no student",
        ),
        ("mini_table2", ["objective=att_kll"], [], "unknown objective 'att_kll'"),
        ("mini_table2", [], ["task=rtee"], "unknown task 'rtee'"),
        ("mini_table2", ["trainer.nope=1"], [], "experiment mini_table2: .*nope"),
        (  # the grids' task, not the distillations': they read none
            "mini_table2",
            ["task=rte"],
            [],
            "task=rte: the distillations of mini_table2 are task-agnostic .*: --finetune task=rte$",
        ),
        (
            "mini_table1",
            ["hydra/launcher=slurm_ddp"],
            [],
            "step 'distil': setting=task_specific trains in one process a job, and its launcher "
            "starts 1 node.s. x 8 task.s. a job",
        ),
        (  # docs/studies.md's data-parallel study: the grids' launcher takes its nodes=4 too
            "table2_agnostic",
            ["hydra/launcher=slurm_ddp", "hydra.launcher.nodes=4"],
            ["hydra/launcher=slurm"],
            "step 'finetune': setting=finetune .* 4 node.s. x 1 task.s. a job: .*nodes=1",
        ),
    ],
)
def test_bad_input_is_one_config_error_before_any_step(name, overrides, finetune, message):
    with pytest.raises(ConfigError, match=message):
        study_config.make_study(name, overrides, finetune)


class FakeSteps:
    """Stands in for run_child: records the commands; `fail_at` (a module name) exits 1; no stop
    signal comes."""

    def __init__(self, fail_at: str | None = None):
        self.commands, self.fail_at = [], fail_at

    def __call__(self, command):
        self.commands.append(command)
        return 1 if command[2] == self.fail_at else 0, False


def test_the_study_fine_tunes_every_completed_student_then_reports(tmp_path, monkeypatch):
    # in the sweep's order: the preset's objectives, hid_seq before att_kl
    students = [write_record(tmp_path / f"objective={o},seed=1") for o in ("hid_seq", "att_kl")]
    fake = FakeSteps()
    monkeypatch.setattr(study, "run_child", fake)
    got = study_config.make_study("mini_table2", [f"hydra.sweep.dir={tmp_path}"], [])
    study.run_study(got)
    assert fake.commands == [
        study.distill_command(got),
        *(study.finetune_command(got, s, 1) for s in students),
        study.report_command(got),
    ]


def grid_commands(fake: FakeSteps, preset: str) -> list[str]:
    """The student each of a fake study's steps of `preset` was given."""
    keys = tuple(f"{key}=" for key in study_config.STUDENT_AS.values())
    return [
        token.split("=", 1)[1].strip("'")
        for command in fake.commands
        if f"+experiment={preset}" in command
        for token in command
        if token.startswith(keys)
    ]


def test_a_rerun_of_a_chain_hands_on_the_distillations_students_not_its_own(tmp_path, monkeypatch):
    """The chained step's students (a distillation too) sit below the sweep dir: a re-run gives
    the assistant's student to the next step, never the step's own students as teachers."""
    assistant = write_record(tmp_path / "seed=1")
    write_record(tmp_path / "mini_minilm_ta_student" / "seed=1" / "seed=1")
    fake = FakeSteps()
    monkeypatch.setattr(study, "run_child", fake)
    study.run_study(study_config.make_study("mini_minilm_ta", [f"hydra.sweep.dir={tmp_path}"], []))
    assert grid_commands(fake, "mini_minilm_ta_student") == [str(assistant.resolve())]


def test_a_rerun_with_other_overrides_goes_on_and_reports_from_its_own_jobs_only(
    tmp_path, monkeypatch
):
    """Folders of an earlier run with other overrides stay under the sweep dir: the next step takes
    none of their students, and the job list the report reads names this run's sweeps' alone."""
    write_record(tmp_path / "objective=att_kl,stages.distillation.steps=4,seed=1")  # earlier
    students = [write_record(tmp_path / f"objective=att_kl,seed={s}", seed=s) for s in (1, 2)]
    fake = FakeSteps()
    monkeypatch.setattr(study, "run_child", fake)
    got = study_config.make_study(
        "mini_table2", [f"hydra.sweep.dir={tmp_path}", "objective=att_kl"], ["task=rte"]
    )
    study.run_study(got)
    assert grid_commands(fake, "mini_table2_finetune") == [str(s.resolve()) for s in students]
    jobs = (tmp_path / "study_jobs.txt").read_text().splitlines()
    grid = [
        f"stages.finetune.batch_size=16,stages.finetune.optimizer.lr={lr},task=rte,seed=1"
        for lr in ("3e-05", "8e-05")
    ]
    assert jobs == [
        "objective=att_kl,seed=1",
        "objective=att_kl,seed=2",
        *(f"finetune/objective=att_kl,seed={s}/{point}" for s in (1, 2) for point in grid),
    ]


def test_a_chained_step_runs_at_its_students_seed(tmp_path, monkeypatch):
    """A chained distillation's record carries its own seed: each runs at its student's, so the
    chain's records pair by seed (the chained preset sweeps seed 1 alone)."""
    for seed in (1, 2):
        write_record(tmp_path / f"seed={seed}", seed=seed)
    fake = FakeSteps()
    monkeypatch.setattr(study, "run_child", fake)
    got = study_config.make_study("mini_tinybert", [f"hydra.sweep.dir={tmp_path}", "seed=1,2"], [])
    study.run_study(got)
    chained = [c for c in fake.commands if "+experiment=mini_tinybert_task" in c]
    assert [[t for t in c if t.startswith("seed=")] for c in chained] == [["seed=1"], ["seed=2"]]
    jobs = (tmp_path / "study_jobs.txt").read_text().splitlines()
    assert jobs[2:] == [f"mini_tinybert_task/seed={s}/task=sst2,seed={s}" for s in (1, 2)]


def test_a_failed_step_stops_the_study_with_one_line_naming_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(study, "run_child", FakeSteps(fail_at="kdbench.run"))
    with pytest.raises(SystemExit) as exc:
        study.run_study(study_config.make_study("mini_table1", [f"hydra.sweep.dir={tmp_path}"], []))
    assert exc.value.code == 1
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and error[0].startswith("kdbench: error: study step 'distil")


def test_no_completed_student_stops_the_study(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(study, "run_child", FakeSteps())
    with pytest.raises(SystemExit):
        study.run_study(study_config.make_study("mini_table2", [f"hydra.sweep.dir={tmp_path}"], []))
    assert "found no completed distillation" in capsys.readouterr().err


def test_main_refuses_an_unknown_preset_with_exit_code_2(capsys):
    with pytest.raises(SystemExit) as exc:
        study.main(["table9"])
    assert exc.value.code == 2 and "unknown experiment 'table9'" in capsys.readouterr().err


def test_a_study_that_shares_its_folder_says_which_jobs_another_process_runs(
    tmp_path, monkeypatch, capsys
):
    from kdbench.runtime.joblock import claim

    monkeypatch.setattr(study, "run_child", FakeSteps())
    done, running = tmp_path / "objective=att_kl,seed=1", tmp_path / "objective=att_kl,seed=2"
    with claim(done):
        pass
    with claim(running):  # held, as by the same study started in another terminal
        study.run_study(study_config.make_study("mini_table1", [f"hydra.sweep.dir={tmp_path}"], []))
    out = capsys.readouterr().out
    assert f"1 job(s) under {tmp_path} are being run by another process ({running}: pid " in out
    assert "done:" not in out


def test_the_study_names_its_pre_registered_design_before_its_first_step(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.setattr(study, "run_child", FakeSteps())
    out = tmp_path / "results"
    got = study_config.make_study("mini_table1", [f"hydra.sweep.dir={tmp_path}"], [], out)
    study.run_study(got)
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith(f"kdbench.study: no pre-registered design at {out / 'DESIGN.md'}")
    out.mkdir(exist_ok=True)
    (out / "DESIGN.md").write_text("# the question, the design, the seeds\n")
    study.run_study(got)
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith(f"kdbench.study: pre-registered design: {out / 'DESIGN.md'} (sha256 ")


def test_a_sweep_dir_another_study_holds_is_refused_before_any_step(tmp_path, monkeypatch, capsys):
    """Two presets' jobs share folder names (the preset is not in them): a second study in the
    first one's sweep dir would re-run the first one's completed jobs in place with its config."""
    fake = FakeSteps()
    monkeypatch.setattr(study, "run_child", fake)
    study.run_study(study_config.make_study("mini_table1", [f"hydra.sweep.dir={tmp_path}"], []))
    commands = len(fake.commands)
    with pytest.raises(SystemExit) as exc:
        study.run_study(study_config.make_study("mini_table3", [f"hydra.sweep.dir={tmp_path}"], []))
    assert exc.value.code == 2 and len(fake.commands) == commands
    error = capsys.readouterr().err.strip().splitlines()
    assert error == [
        f"kdbench: error: {tmp_path} holds the runs of the study mini_table1: give the study "
        "mini_table3 a sweep dir of its own (hydra.sweep.dir=DIR)"
    ]
    study.run_study(study_config.make_study("mini_table1", [f"hydra.sweep.dir={tmp_path}"], []))


NO_OBJECTIVE = "hydra.job.config.override_dirname.exclude_keys=[seed,objective]"


@pytest.mark.parametrize(
    ("name", "overrides", "finetune", "step", "key"),
    [
        ("mini_table1", ["teacher.name_or_path=a,b"], [], "distil", "teacher.name_or_path"),
        ("mini_table2", ["data.glue_dir=/a,/b"], [], "distil", "data.glue_dir"),
        ("mini_table2", [], ["task=rte", "data.glue_dir=/a,/b"], "finetune", "data.glue_dir"),
        ("mini_minilm_ta", [], ["corpus.path=/a,/b"], "mini_minilm_ta_student", "corpus.path"),
        ("mini_table1", [NO_OBJECTIVE, "objective=att_kl,hid_seq"], [], "distil", "objective"),
    ],
)
def test_a_sweep_of_any_step_over_a_key_its_job_folders_leave_out_is_refused_before_the_first(
    tmp_path, monkeypatch, capsys, name, overrides, finetune, step, key
):
    """Every value's job of that step would write one folder: the study stops in one line before
    its first step, not when the step's own sweep starts (after hours of the steps before it)."""
    fake = FakeSteps()
    monkeypatch.setattr(study, "run_child", fake)
    sweep_dir = tmp_path / "sweep"
    finetunes = [token for override in finetune for token in ("--finetune", override)]
    with pytest.raises(SystemExit) as exc:
        study.main([name, f"hydra.sweep.dir={sweep_dir}", *overrides, *finetunes])
    assert exc.value.code == 2 and fake.commands == [] and not sweep_dir.exists()
    assert capsys.readouterr().err.splitlines() == [
        f"kdbench: error: study step '{step}': a sweep over {key} writes the jobs of all its "
        f"values into one folder (a job's folder is not named by {key}): run one study per "
        "value, each with its own hydra.sweep.dir"
    ]


def test_a_sweep_of_a_step_over_keys_its_job_folders_name_passes_the_study_check():
    got = study_config.make_study("mini_table2", ["objective=att_kl,hid_seq"], ["task=rte,sst2"])
    assert got.finetune_overrides == ("task=rte,sst2",)
