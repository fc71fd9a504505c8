"""Bad input: one readable line naming the problem and the fix, exit code 2, no traceback, nothing
heavy started."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from kdbench.planning.command_line import check_overrides, check_run_folder
from tests.helpers import agnostic_overrides, tiny_overrides, write_tiny_corpus, write_tiny_glue


def cli(*args, env_glue=None, cwd=None):
    env = {
        k: v for k, v in os.environ.items() if k != "KDBENCH_CORPUS"
    }  # the corpus is given where it is needed
    if env_glue is not None:
        env["KDBENCH_GLUE_DIR"] = str(env_glue)
    return subprocess.run(
        [sys.executable, "-m", "kdbench.run", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        cwd=cwd,
    )


def assert_one_line_error(result, *fragments):
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("kdbench: error: ")
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    assert "Traceback" not in result.stderr


def test_cli_unknown_option_lists_the_valid_ones(tmp_path):
    assert_one_line_error(
        cli("objective=att_kll", f"paths.run_dir={tmp_path}"),
        "unknown objective 'att_kll'",
        "att_kl",
    )


def test_cli_unknown_option_inside_a_sweep(tmp_path):
    assert_one_line_error(
        cli("-m", "task=sst2,sts", f"paths.run_dir={tmp_path}"), "unknown task 'sts'", "stsb"
    )


@pytest.mark.parametrize("override", ["data.glue_dir=/a,/b", "+experiment=demo,distill"])
def test_a_sweep_over_a_key_its_job_folders_leave_out_is_refused(capsys, override):
    """Its values' jobs would share one folder, each overwriting the record of the one before."""
    with pytest.raises(SystemExit) as exited:
        check_overrides(["-m", "objective=att_kl,vanilla_kd", "seed=1,2", override])
    key = override.split("=")[0].lstrip("+")
    assert exited.value.code == 2 and capsys.readouterr().err == (
        f"kdbench: error: a sweep over {key} writes the jobs of all its values into one folder (a "
        f"job's folder is not named by {key}): run one sweep per value, each with its own "
        "hydra.sweep.dir\n"
    )


def test_a_sweep_over_keys_its_job_folders_name_passes_the_check():
    check_overrides(["-m", "objective=att_kl,vanilla_kd", "seed=1,2", "task=sst2,rte"])
    check_overrides(  # a key named again in the folders
        ["-m", "data.glue_dir=/a,/b", "hydra.job.config.override_dirname.exclude_keys=[seed]"]
    )


def exit_and_modules(modules: tuple[str, ...], *overrides: str) -> list[str]:
    """The exit code of the command line given `overrides`, then which of `modules` it loaded."""
    script = f"""
import sys
from kdbench.run import main
try:
    main(sys.argv[1:])
except SystemExit as exc:
    print(exc.code, *(name for name in {modules} if name in sys.modules))
"""
    checked = subprocess.run(
        [sys.executable, "-c", script, *overrides], capture_output=True, text=True, timeout=300
    )
    assert checked.stderr.startswith("kdbench: error: "), checked.stdout + checked.stderr
    return checked.stdout.split()


HEAVY = ("torch", "transformers", "datasets", "scipy", "sklearn", "pandas")
TRAINING_CODE = ("datasets", "transformers.modeling_utils", "kdbench.models.student")
TRAINING_CODE += ("kdbench.recipes.task_specific", "kdbench.training.loop")
TRAINING_CODE += ("scipy", "sklearn")  # what scores the dev set


@pytest.mark.parametrize(
    "override", ["objective=att_kll", "trainer.epochs=3", "trainer.max_steps=-3", "seed=[1"]
)
def test_a_bad_override_is_refused_before_torch_and_transformers_load(tmp_path, override):
    """A mistyped group option, key or value is refused in about a second: the entry point loads
    Hydra and the override checks, nothing that trains."""
    assert exit_and_modules(HEAVY, override, f"paths.run_dir={tmp_path / 'run'}") == ["2"]
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("overrides", [["seed=abc"], ["init=layers", "init.layers=[2,9]"]])
def test_bad_input_the_plan_finds_is_refused_before_the_training_code_loads(
    tiny_glue, tmp_path, overrides
):
    """A value or a layer the teacher lacks, found by the plan, is refused before the models'
    code, the datasets, the recipes and the metrics' libraries load (torch and the model configs
    are loaded)."""
    run = tiny_overrides(tiny_glue, tmp_path / "run", *overrides)
    assert exit_and_modules(TRAINING_CODE, *run) == ["2"]


def test_cli_unknown_key(tmp_path):
    assert_one_line_error(cli("trainer.epochs=3", f"paths.run_dir={tmp_path}"), "trainer.epochs")


@pytest.mark.parametrize(
    ("override", "line"),
    [
        ("task.text_column=text", "task.text_column is not a key; did you mean task.text_columns?"),
        ("tsk.lr=1", "tsk.lr is not a key; did you mean task.lr?"),
        ("studnt=tiny", "studnt is not a key; did you mean student?"),
        ("task.zzz=1", "task.zzz is not a key; python -m kdbench.run --cfg job lists them"),
        # a flat key the stage blocks replace names its stage key
        (
            "trainer.stage1_epochs=2",
            "trainer.stage1_epochs is now stages.intermediate.epochs: "
            "write stages.intermediate.epochs=...",
        ),
        (
            "prediction_kd.alpha=1",
            "prediction_kd.alpha is now stages.prediction.objective.terms.0.params.alpha: "
            "write stages.prediction.objective.terms.0.params.alpha=...",
        ),
    ],
)
def test_an_unknown_key_is_answered_with_the_closest_one(capsys, override, line):
    with pytest.raises(SystemExit) as exited:
        check_overrides(["+experiment=distill", "task=custom", override])
    assert exited.value.code == 2 and capsys.readouterr().err == f"kdbench: error: {line}\n"


def test_a_value_the_grammar_rejects_is_answered_with_it_quoted(capsys):
    with pytest.raises(SystemExit) as exited:
        check_overrides(["+experiment=distill", "task=custom", "task.delimiter=;"])
    assert exited.value.code == 2 and capsys.readouterr().err == (
        "kdbench: error: cannot parse the override task.delimiter=;: quote a value with "
        "characters Hydra's grammar reserves, e.g. \"task.delimiter=';'\"\n"
    )


@pytest.mark.parametrize(
    ("overrides", "fragments"),
    [
        (["init=layers", "init.layers=[1,2,3]"], ["init.layers=[1, 2, 3]", "student has 2 layers"]),
        (["init=layers", "init.layers=[2,9]"], ["layer 9 does not exist", "1..4"]),
        (["student=2x384"], ["hidden size 384 (the teacher's 32)", "init=random"]),
        (["stages.intermediate.epochs=-1"], ["stages.intermediate.epochs=-1", "non-negative"]),
        (["stages.intermediate.batch_size=0"], ["stages.intermediate.batch_size=0"]),
        (["stages.intermediate.optimizer.lr=0"], ["learning rate"]),
        (["data.train_limit=0"], ["data.train_limit=0", "positive number of examples"]),
        (["task=qnli"], ["QNLI/train.tsv", "missing"]),
        (["setting=task_agnostic"], ["corpus=local needs corpus.path"]),
        (
            ["setting=task_agnostic", "corpus.path=.", "stages.distillation.steps=null"],
            ["stages.distillation needs exactly one of epochs and steps"],
        ),
        (
            ["setting=task_agnostic", "corpus.path=.", "trainer=agnostic"]
            + ["stages.distillation.steps=null", "stages.distillation.epochs=1"],
            [
                "setting=task_agnostic counts steps",
                "stages.distillation.steps=",
                "trainer=agnostic",
            ],
        ),
        (
            ["trainer.device=cuda"]
            if not torch.cuda.is_available()
            else ["trainer.device=cuda:99"],
            ["cuda"],
        ),
        (
            ["stages.prediction.objective.terms.0.params.alpha=1.5"],
            ["stages.prediction.objective.terms.0.params.alpha=1.5", "a number in [0, 1]"],
        ),
        (
            ["stages.teacher.optimizer.weight_decay=nan"],
            ["stages.teacher.optimizer.weight_decay=nan", "number >= 0"],
        ),
        (["objective.terms.0.weight=abc"], ["objective.terms.0.weight='abc'", "number >= 0"]),
        (
            ["teacher.shape.max_positions=16"],
            ["trainer.max_length=64", "16 positions", "max_positions"],
        ),
        (["init=pretrained"], ["init.path is not set", "add init.path="]),
        (
            ["task.tsv.header=false"],
            ["task.tsv.columns.sentence='sentence'", "task.tsv.header=false"],
        ),
    ],
)
def test_cli_bad_config_is_refused_before_work(tiny_glue, tmp_path, overrides, fragments):
    result = cli(*tiny_overrides(tiny_glue, tmp_path / "run"), *overrides)
    assert_one_line_error(result, *fragments)
    record = json.loads(
        (tmp_path / "run" / "result.json").read_text()
    )  # a sweep's report lists it as failed
    assert record["status"] == "failed" and fragments[0] in record["error"]
    assert not (tmp_path / "run" / "train_log.jsonl").exists()  # refused before any work


def in_hydras_folder(overrides: list[str]) -> list[str]:
    """The overrides less paths.run_dir: the run writes to the folder Hydra makes for it."""
    return [override for override in overrides if not override.startswith("paths.run_dir=")]


def test_a_run_refused_before_work_leaves_no_folder(tiny_glue, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    overrides = in_hydras_folder(tiny_overrides(tiny_glue, tmp_path))
    result = cli(*overrides, "stages.teacher.batch_size=0", cwd=work)
    assert_one_line_error(result, "stages.teacher.batch_size=0")
    assert list(work.iterdir()) == []


def test_a_run_failing_after_work_keeps_its_failed_record(tmp_path):
    glue, work = write_tiny_glue(tmp_path / "glue"), tmp_path / "work"
    work.mkdir()
    path = glue / "SST-2" / "train.tsv"
    path.write_text(path.read_text() + "a row without a label\n")
    result = cli(*in_hydras_folder(tiny_overrides(glue, tmp_path)), cwd=work)
    assert_one_line_error(result, "SST-2/train.tsv:50")
    (record,) = work.glob("outputs/*/*/result.json")
    assert json.loads(record.read_text())["status"] == "failed"


def test_a_run_in_a_folder_the_user_named_makes_no_other(tmp_path):
    glue, work = write_tiny_glue(tmp_path / "glue"), tmp_path / "work"
    work.mkdir()
    path = glue / "SST-2" / "train.tsv"
    path.write_text(path.read_text() + "a row without a label\n")
    result = cli(*tiny_overrides(glue, work / "run"), cwd=work)
    assert_one_line_error(result, "SST-2/train.tsv:50")
    assert [p.name for p in work.iterdir()] == ["run"]  # no outputs/ beside it
    assert json.loads((work / "run" / "result.json").read_text())["status"] == "failed"


def test_cli_binary_data_file_is_named(tmp_path):
    glue = write_tiny_glue(tmp_path / "glue")
    (glue / "SST-2" / "train.tsv").write_bytes(bytes(range(256)) * 4)  # not text at all
    result = cli(*tiny_overrides(glue, tmp_path / "run"))
    assert_one_line_error(result, "SST-2/train.tsv is not UTF-8 text", "original file")


def test_cli_malformed_data_names_file_and_line(tmp_path):
    glue = write_tiny_glue(tmp_path / "glue")
    path = glue / "SST-2" / "train.tsv"
    path.write_text(path.read_text() + "a row without a label\n")
    result = cli(*tiny_overrides(glue, tmp_path / "run"))
    assert_one_line_error(result, "SST-2/train.tsv:50", "tab-separated columns")
    record = json.loads((tmp_path / "run" / "result.json").read_text())
    assert record["status"] == "failed" and "train.tsv:50" in record["error"]


@pytest.mark.parametrize(
    ("task", "folder", "label", "bad", "fragments"),
    [
        (
            "sst2",
            "SST-2",
            "\t1\n",
            "\t\u00b2\n",
            ["SST-2/train.tsv:", "label '\u00b2' is outside the label set"],
        ),
        (
            "stsb",
            "STS-B",
            "\t1.000\n",
            "\tnan\n",
            ["STS-B/train.tsv:", "label 'nan' is not a finite number"],
        ),
    ],
)
def test_cli_labels_that_are_no_labels_name_file_and_line(
    tmp_path, task, folder, label, bad, fragments
):
    glue = write_tiny_glue(tmp_path / "glue")
    path = glue / folder / "train.tsv"
    path.write_bytes(path.read_bytes().replace(label.encode(), bad.encode(), 1))
    assert_one_line_error(cli(*tiny_overrides(glue, tmp_path / "run"), f"task={task}"), *fragments)


@pytest.mark.parametrize("setting", ["task_specific", "finetune"])
def test_a_setting_that_trains_in_one_process_refuses_a_launch_of_several(
    tiny_glue, tmp_path, monkeypatch, setting
):
    """Each process of the launch would run the whole job into the same folder (rank 1 on, into
    rank 0's folder, after rank 0 stopped)."""
    monkeypatch.setenv("WORLD_SIZE", "2")
    overrides = tiny_overrides(tiny_glue, tmp_path, f"setting={setting}")
    if setting == "finetune":
        overrides.append(f"setting.student_path={tmp_path / 'student'}")
    assert_one_line_error(
        cli(*overrides),
        f"setting={setting} trains in one process, and this launch started 2 (WORLD_SIZE=2)",
        "hydra/launcher=slurm, not slurm_ddp",
    )
    assert json.loads((tmp_path / "result.json").read_text())["status"] == "failed"


def test_a_launch_of_several_processes_into_hydras_dated_folder_is_refused(tmp_path, monkeypatch):
    """Each process would date its own folder by the second it starts in: rank 0's record and
    checkpoints in one, rank 1's claim and log in another. Refused before Hydra makes any."""
    monkeypatch.setenv("WORLD_SIZE", "2")
    work = tmp_path / "work"
    work.mkdir()
    overrides = in_hydras_folder(agnostic_overrides(write_tiny_corpus(tmp_path), tmp_path))
    result = cli(*overrides, cwd=work)
    assert_one_line_error(result, "this launch started 2 processes", "paths.run_dir=DIR")
    assert list(work.iterdir()) == []


@pytest.mark.parametrize(
    ("environment", "extra", "refused"),
    [
        ({"SLURM_PROCID": "0", "SLURM_NTASKS": "2"}, [], True),  # srun -n 2
        ({"WORLD_SIZE": "2"}, ["paths.run_dir=/tmp/x"], False),
        ({"WORLD_SIZE": "2"}, ["paths.run_dir=/tmp/x/${hydra:job.name}"], False),
        ({"WORLD_SIZE": "2"}, ["hydra.run.dir=/tmp/x"], False),
        ({"WORLD_SIZE": "2"}, ["-m", "seed=1,2"], True),  # Hydra's dated sweep folder
        ({"WORLD_SIZE": "2"}, ["-m", "seed=1,2", "hydra.sweep.dir=/tmp/x"], False),
        ({"WORLD_SIZE": "2"}, ["-m", "seed=1,2", "paths.run_dir=/tmp/x/${hydra:job.num}"], False),
        ({"WORLD_SIZE": "2"}, ["-m", "seed=1,2", "+experiment=minilm_v2_recipe"], False),
        ({"WORLD_SIZE": "1"}, [], False),
    ],
)
def test_only_several_processes_without_a_named_run_folder_are_refused(
    monkeypatch, capsys, environment, extra, refused
):
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    if not refused:
        check_run_folder(["setting=task_agnostic", *extra])
        return
    with pytest.raises(SystemExit) as exited:
        check_run_folder(["setting=task_agnostic", *extra])
    assert exited.value.code == 2
    folder = (
        "sweep folder: give them one with hydra.sweep.dir=DIR" if extra else "paths.run_dir=DIR"
    )
    assert folder in capsys.readouterr().err


def test_cli_success_prints_scores_and_where_the_record_is(tiny_glue, tmp_path):
    result = cli(*tiny_overrides(tiny_glue, tmp_path), "objective=vanilla_kd")
    assert result.returncode == 0, result.stderr
    assert (
        "teacher (tiny): accuracy" in result.stdout
        and f"record: {tmp_path}/result.json" in result.stdout
    )


@pytest.mark.parametrize(
    ("mutate", "fragments"),
    [
        (
            lambda text: text.replace("\t1\n", "\t7\n", 1),
            ["SST-2/train.tsv:", "label '7' is outside the label set"],
        ),
        (lambda text: "", ["SST-2/train.tsv is empty"]),
        (lambda text: "sentence\tlabel\n", ["has no data rows"]),
    ],
)
def test_cli_bad_data_files(tmp_path, mutate, fragments):
    glue = write_tiny_glue(tmp_path / "glue")
    path = glue / "SST-2" / "train.tsv"
    path.write_text(mutate(path.read_text()))
    assert_one_line_error(cli(*tiny_overrides(glue, tmp_path / "run")), *fragments)


@pytest.mark.parametrize(
    ("overrides", "fragments"),
    [
        (["task=stsb", "objective=hid_cls_contrast"], ["needs a classification task"]),
        (["init=layers", "init.layers=[4,2]"], ["strictly ascending"]),
        (["init=layers", "init.layers=[3,3]"], ["strictly ascending"]),
        (
            ["student=tiny", "student.num_heads=2", "init=random", "objective=att_kl"],
            ["2 heads", "minilm_v2"],
        ),
        (
            ["teacher.finetuned_path=/nonexistent/teacher", "stages.teacher.epochs=0"],
            ["cannot load the fine-tuned teacher"],
        ),
        (["task=mnli"], ["MNLI/train.tsv", "missing"]),
        (
            ["objective=hid_cls_contrast", "+objective.terms.0.params.temprature=0.1"],
            ["objective.terms.0.params.temprature is not a parameter of crd", "temperature"],
        ),
        (
            ["objective=att_kl", "objective.terms.0.params.padding=keys"],
            ["objective.terms.0.params.padding='keys' must be one of masked, rows, none"],
        ),
        (
            ["objective=hid_cls", "+objective.terms.0.layers=every"],
            ["layers=every concatenates each side's layers", "not hid_mse"],
        ),
        (
            ["stages.intermediate.device_batch_size=4"],
            ["stages.intermediate.device_batch_size=4: micro-batches apply to the task-agnostic"],
        ),
    ],
)
def test_cli_more_bad_configs(tiny_glue, tmp_path, overrides, fragments):
    assert_one_line_error(cli(*tiny_overrides(tiny_glue, tmp_path / "run"), *overrides), *fragments)


@pytest.mark.parametrize(
    ("overrides", "fragments"),
    [
        (["objective=vanilla_kd", "teacher.has_mlm_head=false"], ["has no MLM head"]),
        (["stages.distillation.steps=-3"], ["stages.distillation.steps=-3"]),
        (["corpus.format=pdf"], ["corpus.format='pdf'", "text"]),
        (  # att_kl reads unmasked text: the smoothing would weigh nothing
            ["objective=att_kl", "trainer.mlm_smoothing=0.7"],
            [
                "trainer.mlm_smoothing=0.7 weighs which tokens are masked, and objective att_kl "
                "reads unmasked text: set trainer.mask_inputs=always to mask its input, or "
                "trainer.mlm_smoothing=null"
            ],
        ),
        (
            ["stages.distillation.batch_size=512", "stages.distillation.device_batch_size=64"],
            [
                "training sequences, fewer than one global batch of "
                "stages.distillation.batch_size=512: add text or lower the batch size"
            ],
        ),
        (  # 8 held-out sequences, a held-out batch of 16
            [
                "corpus.heldout_fraction=0.05",
                "stages.distillation.batch_size=16",
                "stages.distillation.device_batch_size=16",
            ],
            [
                "the corpus has 8 held-out sequences, fewer than one held-out batch of 16",
                "raise corpus.heldout_fraction, add text or lower "
                "stages.distillation.device_batch_size",
            ],
        ),
    ],
)
def test_cli_bad_task_agnostic_configs(tmp_path, overrides, fragments):
    corpus = write_tiny_corpus(tmp_path / "corpus")
    assert_one_line_error(
        cli(*agnostic_overrides(corpus, tmp_path / "run"), *overrides), *fragments
    )


def test_cli_binary_corpus_file_is_named_with_its_line(tmp_path):
    corpus = write_tiny_corpus(tmp_path / "corpus")
    shard = corpus / "AA" / "wiki_00"
    text = shard.read_bytes()
    shard.write_bytes(text + b"\xff\xfe not text\n")
    result = cli(*agnostic_overrides(corpus, tmp_path / "run"))
    line = text.count(b"\n") + 1
    assert_one_line_error(
        result,
        f"{shard} is not UTF-8 text (line {line}, byte 0xff at offset {len(text)})",
        "re-encode the corpus as UTF-8",
    )


def test_cli_corpus_without_usable_text(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "wiki_00").write_text("\n\n")
    assert_one_line_error(cli(*agnostic_overrides(empty, tmp_path / "run")), "no", str(empty))


def test_debug_shows_the_traceback(tmp_path):
    result = cli(
        "objective=att_kl",
        "stages.intermediate.optimizer.lr=-1",
        "kdbench.debug=true",
        f"paths.run_dir={tmp_path}",
    )
    assert (
        result.returncode == 2
        and "Traceback" in result.stderr
        and "kdbench: error:" in result.stderr
    )


@pytest.mark.parametrize("where", ["cache", "run_dir"])
def test_an_unusable_folder_is_bad_input(tiny_glue, tmp_path, where):
    """A cache or run folder under a file, or a file where the folder belongs, is one line and
    exit 2."""
    (tmp_path / "file").write_text("x")
    folder = tmp_path / "file" / "kd" if where == "cache" else tmp_path / "file"
    overrides = tiny_overrides(tiny_glue, folder if where == "run_dir" else tmp_path / "run")
    if where == "cache":
        overrides.append(f"paths.cache_dir={folder}")
    under = f"is under {tmp_path / 'file'}, a file"
    problem = under if where == "cache" else "is a file, not a folder"
    assert_one_line_error(cli(*overrides), problem, "give a folder this user can write")


@pytest.mark.parametrize(
    ("run_dir", "refused"),
    [
        ("{tmp}/one", "objective"),
        ("{tmp}/${{objective.name}}", "seed"),
        ("{tmp}/${{objective.name}}/${{seed}}", None),
        ("{tmp}/${{hydra:job.num}}", None),
    ],
)
def test_a_sweep_whose_jobs_share_a_run_folder_is_refused(capsys, tmp_path, run_dir, refused):
    """A paths.run_dir that two jobs of a sweep resolve alike (the second would write over the
    first's record) is one line naming the key it does not change with, exit 2."""
    folder = run_dir.format(tmp=tmp_path)
    line = refusal(
        capsys, ["-m", "objective=att_kl,hid_seq", "seed=1,2", f"paths.run_dir={folder}"]
    )
    if refused is None:
        assert line is None
        return
    assert (
        f"is the folder of every {refused} of this sweep" in line and "hydra.sweep.dir=DIR" in line
    )


@pytest.mark.parametrize(
    ("run_dir", "problem"),
    [
        ("{file}/${{hydra:job.override_dirname}}", "is under {file}, a file"),
        ("{file}/${{hydra:job.name}}", "is under {file}, a file"),
        ("{tmp}/" + "n" * 300, "has a name of 300 bytes, over the 255 a file system allows"),
        ("{tmp}/${{hydra:job.override_dirname}}", None),
        ("{tmp}/${{hydra:job.num}}", None),
        ("{tmp}/${{hydra:runtime.output_dir}}", None),  # known to the running job alone
    ],
)
def test_a_run_folder_is_checked_as_its_job_resolves_it(capsys, tmp_path, run_dir, problem):
    """paths.run_dir is checked with Hydra's resolver (`${hydra:...}`), and a name longer than a
    file system allows is one line, exit 2."""
    (tmp_path / "file").write_text("x")
    folder = run_dir.format(file=tmp_path / "file", tmp=tmp_path)
    line = refusal(capsys, ["-m", "objective=att_kl,hid_seq", f"paths.run_dir={folder}"])
    if problem is None:
        assert line is None
        return
    assert line.startswith("kdbench: error: paths.run_dir=")
    assert problem.format(file=tmp_path / "file") in line


def test_a_preset_sweep_whose_jobs_share_a_run_folder_is_refused(capsys, tmp_path):
    """A preset's own sweep (`hydra.sweeper.params`) is checked as the command line's is."""
    line = refusal(capsys, ["-m", "+experiment=mini_table1", f"paths.run_dir={tmp_path}"])
    assert "is the folder of every objective of this sweep" in line
    folder = f"paths.run_dir={tmp_path}/${{objective.name}}/${{seed}}"
    assert refusal(capsys, ["-m", "+experiment=mini_table1", folder]) is None


def refusal(capsys, argv: list[str]) -> str | None:
    """The one line check_overrides refuses `argv` with (exit 2); None where it passes."""
    try:
        check_overrides(argv)
    except SystemExit as exited:
        line = capsys.readouterr().err.strip()
        assert exited.code == 2 and "\n" not in line
        return line
    return None


def test_a_fine_tuning_refuses_to_save_a_student_it_would_not_save(tiny_glue, tmp_path):
    """setting=finetune scores the student it fine-tunes and writes no model: save_student=true
    would leave the user without the folder it asked for."""
    from kdbench.job import run
    from tests.helpers import compose_config

    corpus = write_tiny_corpus(tmp_path / "corpus")
    distilled = run(compose_config(agnostic_overrides(corpus, tmp_path / "distill")))
    result = cli(
        *tiny_overrides(tiny_glue, tmp_path / "ft"),
        "setting=finetune",
        f"setting.student_path={distilled['student_path']}",
        "save_student=true",
    )
    assert_one_line_error(result, "save_student=true", "setting=finetune", "saves no model")
    assert json.loads((tmp_path / "ft" / "result.json").read_text())["status"] == "failed"
