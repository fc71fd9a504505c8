"""kdbench.report --paper: the shipped published numbers (kdbench/paper/wang2023_tables.csv), their
kdbench names, the runs that stand for them, and the published-vs-measured tables."""

from __future__ import annotations

import hashlib
import math
from importlib import resources
from pathlib import Path

import pandas as pd
import pytest
import tomllib
from omegaconf import OmegaConf

import kdbench
from kdbench.errors import ReportError
from kdbench.report import cli
from kdbench.report.frames import AVG, to_frame
from kdbench.report.load import load_records
from kdbench.report.paper import (
    PAPER_COLS,
    PAPER_FILE,
    PAPER_SHA256,
    QUOTED,
    load_paper,
    measured_metric,
    read_cells,
    runs_for_table,
)
from kdbench.report.stats import summarise
from kdbench.report.tables import build_tables, render_markdown
from kdbench.report.versus import render_versus
from tests.unit.report_helpers import read_csv, run_main, write_run

CONF = Path(kdbench.__file__).resolve().parent / "conf"
STEMS = {
    kind: {path.stem for path in (CONF / kind).glob("*.yaml")}
    for kind in ("objective", "task", "teacher", "student")
}
SHARED_CSV = Path("/work/shared/paper/wang2023_tables.csv")
FLAGGED = {
    (1, "hid_cls", "4,8,12"),
    (1, "att_mse+hid_seq", "4,8,12"),
    (3, "hid_cls", "4,8,12"),
    (3, "hid_seq", "1,8,12"),
}
TABLE3_INITS = {"2,4,6": "4,8,12", "1,2,3": "1,2,3"}
NOTE = "MiniLM-L6 for RoBERTa-base, 3x384 for 3x768"
OWN_METRICS = {
    "qnli": {"accuracy": 70.0},
    "sst2": {"accuracy": 80.0},
    "mnli": {"accuracy_matched": 60.0},
    "mrpc": {"f1": 81.0, "accuracy": 68.0},
    "qqp": {"accuracy": 75.0},
    "rte": {"accuracy": 55.0},
    "cola": {"mcc": 5.0, "accuracy": 69.0},
}


@pytest.fixture(scope="module")
def paper() -> pd.DataFrame:
    return load_paper()


# ---------------------------------------------------------------------------------------------- the
# data


def test_shipped_csv_has_368_cells_and_its_sha256():
    data = (resources.files("kdbench.paper") / PAPER_FILE).read_bytes()
    assert hashlib.sha256(data).hexdigest() == PAPER_SHA256
    assert PAPER_SHA256 == "bc80e7119c895c5f5555b66e20212ed60d7e748534a04924fd33a0a54cb7f0ca"
    assert len(read_cells()) == 368


@pytest.mark.skipif(not SHARED_CSV.exists(), reason=f"{SHARED_CSV} not here")
def test_package_copy_equals_the_shared_transcription_cell_by_cell():
    shared = pd.read_csv(SHARED_CSV, dtype=str, keep_default_na=False)
    pd.testing.assert_frame_equal(read_cells(), shared)


def test_csv_is_package_data_and_the_old_json_is_gone():
    pyproject = tomllib.loads(
        (Path(kdbench.__file__).parents[2] / "pyproject.toml").read_text(encoding="utf-8")
    )
    assert "paper/*.csv" in pyproject["tool"]["setuptools"]["package-data"]["kdbench"]
    assert not (resources.files("kdbench.paper") / "wang2023.json").is_file()


def test_every_objective_maps_to_a_kdbench_objective_except_the_quoted_systems(paper):
    mine = paper[~paper["quoted"]]
    assert set(mine["objective"]) <= STEMS["objective"]
    names = dict(zip(paper["paper_objective"], paper["objective"], strict=True))
    assert names["Vanilla KD"] == "vanilla_kd" and names["Hid-CLS-Contrast"] == "hid_cls_contrast"
    assert (
        names["Att-KL+Val-KL"] == "att_kl+val_kl" and names["Att-MSE+Hid-Seq"] == "att_mse+hid_seq"
    )
    quoted = paper[paper["quoted"]]
    assert (
        set(quoted["objective"])
        == set(QUOTED)
        == {f"{s} (published)" for s in ("DistilBERT", "TinyBERT", "MiniLM")}
    )
    assert set(quoted["table"]) == {2} and len(quoted) == 3 * 8
    assert quoted["measured_metric"].isna().all()  # shown as such, never compared


def test_tasks_teachers_students_and_inits_use_kdbench_names(paper):
    assert (
        set(paper["task"]) - {AVG}
        == {"qnli", "sst2", "mnli", "mrpc", "qqp", "rte", "cola"}
        <= STEMS["task"]
    )
    assert dict(zip(read_cells()["teacher"], paper["teacher"], strict=True)) == {
        "RoBERTa-base": "roberta_base",
        "BERT-base-uncased": "bert_base_uncased",
    }
    assert dict(zip(read_cells()["student"], paper["student"], strict=True)) == {
        "3 layers, 768": "3x768",
        "6 layers, 768": "6x768",
    }
    assert set(paper["teacher"]) <= STEMS["teacher"] and set(paper["student"]) <= STEMS["student"]
    first6 = paper[paper["paper_init"] == "first 6"]
    assert (
        len(first6) == 32 and set(first6["init"]) == {"1,2,3,4,5,6"} and set(first6["table"]) == {4}
    )
    others = paper[paper["paper_init"] != "first 6"]
    assert (others["init"] == others["paper_init"]).all()


def _task_metrics(task: str) -> set[str]:
    spec = OmegaConf.load(CONF / "task" / f"{task}.yaml")
    return {f"{m}_{suffix}" if suffix else m for m in spec.metrics for suffix in spec.eval_splits}


def test_measured_metric_is_what_the_paper_reports(paper):
    for table in (1, 3):
        assert measured_metric(table, "cola", "mcc") == "accuracy"
        assert measured_metric(table, "mrpc", "f1") == "accuracy"
    for table in (2, 4):
        assert measured_metric(table, "cola", "mcc") == "mcc"
        assert measured_metric(table, "mrpc", "f1") == "f1"
    assert measured_metric(1, "mnli", "acc") == "accuracy_matched"
    assert measured_metric(2, "qqp", "acc") == "accuracy"
    for row in paper[~paper["quoted"] & (paper["task"] != AVG)].itertuples():
        assert row.measured_metric in _task_metrics(row.task), (row.table, row.task)


def test_exactly_the_four_rows_whose_printed_avg_is_not_their_mean_are_flagged(paper):
    avg = paper[paper["task"] == AVG]
    flagged = avg[avg["avg_flag"].astype(bool)]
    assert {(r.table, r.objective, r.paper_init) for r in flagged.itertuples()} == FLAGGED
    assert paper.loc[paper["task"] != AVG, "avg_flag"].isna().all()


def test_an_avg_that_rounding_alone_explains_is_not_flagged(paper):
    row = paper[(paper["table"] == 4) & (paper["objective"] == "hid_seq")]
    row = row[row["paper_init"] == "first 6"]
    cells, avg = row[row["task"] != AVG], row[row["task"] == AVG].iloc[0]
    unrounded = cells["mean"] + 0.0499  # cells that print as published
    assert (unrounded.round(1) == cells["mean"]).all() and round(unrounded.mean(), 1) == avg["mean"]
    assert not avg["avg_flag"] and round(avg["cells_mean"], 2) == 79.83


# ----------------------------------------------------------------------------------------------
# matching


def _runs(tmp_path: Path) -> Path:
    """A Table 3 replica (one init it does not map), own-design runs of Tables 1/3 and 4, and runs
    of no design."""
    root = tmp_path / "results"
    replica = {
        "teacher": "minilm_l6",
        "student": "3x384",
        "config": {"paper_analogue": {"table": 3, "inits": TABLE3_INITS, "note": NOTE}},
    }
    for seed, (a, b, c) in enumerate([(80.0, 70.0, 60.0), (82.0, 72.0, 61.0)], start=1):
        write_run(
            root, task="sst2", objective="att_kl", init="2,4,6", seed=seed, score=a, **replica
        )
        write_run(
            root, task="sst2", objective="att_kl", init="1,2,3", seed=seed, score=b, **replica
        )
        write_run(
            root, task="sst2", objective="att_kl", init="1,4,6", seed=seed, score=c, **replica
        )
    for task, metrics in OWN_METRICS.items():  # the own design's Vanilla KD on all seven tasks
        write_run(
            root,
            task=task,
            objective="vanilla_kd",
            init="4,8,12",
            score=next(iter(metrics.values())),
            metrics=metrics,
        )
    agnostic = {"setting": "task_agnostic", "teacher": "bert_base_uncased", "student": "6x768"}
    write_run(
        root,
        task="cola",
        objective="hid_seq",
        init="1,2,3,4,5,6",
        score=40.0,
        metrics={"mcc": 40.0, "accuracy": 78.0},
        **agnostic,
    )
    write_run(root, task="rte", objective="distilbert", init="random", score=60.0, **agnostic)
    write_run(
        root,
        task="rte",
        objective="att_kl",
        init="random",
        score=50.0,
        teacher="bert_base_uncased",
        student="3x384",
    )
    return root


@pytest.fixture
def frame(tmp_path: Path) -> pd.DataFrame:
    return to_frame(load_records(_runs(tmp_path)).records)


def test_frame_carries_the_declared_analogue(frame):
    assert str(frame["paper_table"].dtype) == "Int64"
    replica = frame[frame["teacher"] == "minilm_l6"]
    assert set(replica["paper_table"]) == {3} and set(replica["paper_note"]) == {NOTE}
    paper_inits = dict(zip(replica["init"], replica["paper_init"].fillna("none"), strict=True))
    assert paper_inits == {
        "2,4,6": "4,8,12",
        "1,2,3": "1,2,3",
        "1,4,6": "none",
    }  # 1,4,6: not mapped
    own = frame[frame["teacher"] != "minilm_l6"]
    assert own["paper_table"].isna().all() and (own["paper_init"] == own["init"]).all()
    assert own["paper_note"].isna().all()


def test_runs_for_table_takes_declared_analogues_and_the_papers_design_only(frame):
    t3 = runs_for_table(frame, 3)
    assert set(zip(t3["teacher"], t3["init"], t3["paper_init"], strict=True)) == {
        ("minilm_l6", "2,4,6", "4,8,12"),
        ("minilm_l6", "1,2,3", "1,2,3"),
        ("roberta_base", "4,8,12", "4,8,12"),
    }
    t1 = runs_for_table(frame, 1)
    assert set(t1["teacher"]) == {"roberta_base"}  # the replica declares Table 3, not 1
    t4 = runs_for_table(frame, 4)
    assert set(zip(t4["objective"], t4["paper_init"], strict=True)) == {
        ("hid_seq", "first 6"),
        ("distilbert", "random"),
    }
    assert set(runs_for_table(frame, 2)["paper_init"]) == {"first 6", "random"}
    assert (
        frame.loc[t4.index, "paper_init"].tolist().count("1,2,3,4,5,6") == 1
    )  # the frame itself is unchanged
    standing = set().union(*(runs_for_table(frame, table).index for table in (1, 2, 3, 4)))
    rest = frame.drop(index=list(standing))
    assert set(zip(rest["teacher"], rest["student"], rest["init"], strict=True)) == {
        ("minilm_l6", "3x384", "1,4,6"),
        ("bert_base_uncased", "3x384", "random"),
    }


# ---------------------------------------------------------------------------------------------
# rendering


def _sections(md: str) -> dict[str, str]:
    """Markdown split at headings: heading line -> text up to the next heading."""
    parts, head = {}, None
    for line in md.splitlines():
        if line.startswith("#"):
            head = line
            parts[head] = ""
        elif head is not None:
            parts[head] += line + "\n"
    return parts


def test_published_vs_measured_tables(tmp_path: Path):
    out = run_main(_runs(tmp_path), "--paper")
    sections = _sections((out / "tables.md").read_text(encoding="utf-8"))
    heads = [h for h in sections if "published vs measured" in h]
    assert (
        heads
        # no Table 2: no run meets one of its published rows (the distilbert run is not matched)
        == [
            "## Table 1: published vs measured",
            "## Table 3: published vs measured (task_specific, minilm_l6, 3x384)",
            "## Table 3: published vs measured (task_specific, roberta_base, 3x768)",
            "## Table 4: published vs measured",
        ]
    )
    t1 = sections["## Table 1: published vs measured"]
    assert "teacher roberta_base, student 3x768, the paper's own design._" in t1
    assert (
        "| Objective | Init | QNLI (paper) | QNLI (measured) | SST-2 (paper) | SST-2 (measured) | "
        "MNLI (paper) |" in t1
    )
    # CoLA and MRPC as accuracy (69.0, 68.0, not MCC 5.0 or F1 81.0); the measured Avg over all
    # seven tasks
    assert (
        "| vanilla_kd | 4,8,12 | 66.5 ± 1.49 | 70.0 (1) | 84.7 ± 0.16 | 80.0 (1) | 75.1 ± 0.05 | "
        "60.0 (1) | "
        "71.2 ± 0.80 | 68.0 (1) | 81.9 ± 0.10 | 75.0 (1) | 54.0 ± 1.24 | 55.0 (1) | 69.1 ± 0.00 | "
        "69.0 (1) | "
        "71.8 | 68.1 |"
    ) in t1
    assert "| hid_cls | 4,8,12 | 75.7 ± 0.57 |  |" in t1 and "| 73.2 † |  |" in t1
    assert "taken to be accuracy" in t1 and "721/1043" in t1 and "Not shown" not in t1
    assert (
        "hid_cls 4,8,12 (printed 73.2, mean 73.71); att_mse+hid_seq 4,8,12 (printed 77.0, mean "
        "76.69)" in t1
    )


def test_replica_and_own_design_of_one_table_get_a_section_each(tmp_path: Path):
    sections = _sections(
        (run_main(_runs(tmp_path), "--paper") / "tables.md").read_text(encoding="utf-8")
    )
    replica = sections["## Table 3: published vs measured (task_specific, minilm_l6, 3x384)"]
    own = sections["## Table 3: published vs measured (task_specific, roberta_base, 3x768)"]
    assert (
        "a replica whose preset declares Table 3 as its `paper_analogue` (" + NOTE + ")" in replica
    )
    assert "its inits stand for the paper's: 2,4,6 for 4,8,12._" in replica
    assert (
        "| Objective | Init | SST-2 (paper) | SST-2 (measured) | Avg (paper) | measured - paper"
        in replica
    )
    assert "| att_kl | 4,8,12 | 89.0 ± 0.26 | 81.0 ± 1.4 (2) | 77.0 | -8.0 |" in replica
    assert "| att_kl | 1,2,3 | 88.6 ± 0.19 | 71.0 ± 1.4 (2) | 77.7 | -17.6 |" in replica
    assert (
        "| att_kl | 1,8,12 | 89.6 ± 0.13 |  | 77.2 |  |" in replica
    )  # 1,4,6 is not mapped: none stands for 1,8,12
    assert "| vanilla_kd | 4,8,12 | 84.7 ± 0.16 |  |" in replica
    assert "Not shown, no measured run: QNLI, MNLI, MRPC, QQP, RTE, CoLA" in replica
    assert "hid_seq 1,8,12 (printed 77.6, mean 76.93)" in replica
    assert (
        "the paper's own design._" in own
        and "| vanilla_kd | 4,8,12 | 66.5 ± 1.49 | 70.0 (1) |" in own
    )
    assert "| att_kl | 4,8,12 | 85.3 ± 0.14 |  |" in own


def test_agnostic_tables_compare_as_labelled_and_never_match_quoted_systems(tmp_path: Path):
    root = _runs(tmp_path)
    write_run(
        root,
        task="rte",
        objective="vanilla_kd",
        init="random",
        score=61.0,
        setting="task_agnostic",
        teacher="bert_base_uncased",
        student="6x768",
    )
    sections = _sections((run_main(root, "--paper") / "tables.md").read_text(encoding="utf-8"))
    t4 = sections["## Table 4: published vs measured"]
    assert (
        "| Objective | Init | RTE (paper) | RTE (measured) | CoLA (paper) | CoLA (measured) | Avg "
        "(paper) |" in t4
    )
    assert (
        "| hid_seq | first 6 | 66.4 |  | 50.6 | 40.0 (1) | 79.9 | -10.6 |" in t4
    )  # CoLA as MCC, not accuracy 78.0
    assert "| vanilla_kd | random | 61.0 | 61.0 (1) | 54.4 |  | 79.3 | +0.0 |" in t4
    assert "its inits stand for the paper's: 1,2,3,4,5,6 for first 6._" in t4
    assert "† The printed Avg" not in t4 and "Init first 6: the teacher's first six" in t4
    assert (
        "compared as labelled" in t4
        and "Not shown, no measured run: QNLI, SST-2, MNLI, MRPC, QQP (" in t4
    )
    t2 = sections["## Table 2: published vs measured"]
    assert "the paper's own design._" in t2  # its first-6 run stands for Table 4 only
    assert "| vanilla_kd | random | 61.0 | 61.0 (1) | 79.3 | +0.0 |" in t2
    assert (
        "| DistilBERT (published) | random | 59.9 |  | 78.5 |  |" in t2
    )  # the distilbert run is not matched
    assert "earlier systems' numbers that the paper quotes" in t2


def test_runs_standing_for_no_table_are_named_in_one_line(tmp_path: Path):
    md = (run_main(_runs(tmp_path), "--paper") / "tables.md").read_text(encoding="utf-8")
    lines = [line for line in md.splitlines() if line.startswith("_No published numbers beside")]
    assert lines == [
        "_No published numbers beside task_specific / bert_base_uncased / 3x384 (1 run), "
        "task_specific / minilm_l6 / 3x384 (2 runs): these runs neither declare a `paper_analogue` "
        "that "
        "maps their init nor are the paper's own design, and the report does not guess an analogy._"
    ]
    assert md.index("## Table 4: published vs measured") < md.index(lines[0])


def test_paper_csv_is_every_published_cell_with_the_measured_ones(tmp_path: Path):
    out = run_main(_runs(tmp_path), "--paper")
    csv = read_csv(out / "paper.csv")
    assert list(csv.columns) == PAPER_COLS and len(csv) == 368
    cola = csv[(csv.table == 1) & (csv.objective == "vanilla_kd") & (csv.task == "cola")].iloc[0]
    assert (cola.metric, cola.measured_metric, cola.measured_mean, cola.measured_n) == (
        "mcc",
        "accuracy",
        69.0,
        1,
    )
    assert cola.measured_teacher == "roberta_base"
    first6 = csv[
        (csv.table == 4)
        & (csv.objective == "hid_seq")
        & (csv.task == "cola")
        & (csv.init != "random")
    ].iloc[0]
    assert (
        first6.init == "1,2,3,4,5,6"
        and first6.measured_metric == "mcc"
        and first6.measured_mean == 40.0
    )
    replica = csv[
        (csv.table == 3)
        & (csv.objective == "att_kl")
        & (csv.task == "sst2")
        & (csv.init == "1,2,3")
    ]
    assert replica[
        ["measured_teacher", "measured_mean", "measured_std", "measured_n"]
    ].values.tolist() == [["minilm_l6", 71.0, pytest.approx(2**0.5), 2]]
    avg = csv[csv.task == AVG]
    assert avg["avg_flag"].sum() == 4 and csv.loc[csv.task != AVG, "avg_flag"].isna().all()
    assert csv[csv.objective.isin(QUOTED)]["measured_mean"].isna().all()


def test_without_paper_flag_nothing_changes(tmp_path: Path, monkeypatch):
    results = _runs(tmp_path)
    calls = []
    monkeypatch.setattr(cli, "load_paper", lambda: calls.append(1) or load_paper())
    plain = run_main(results)
    md = (plain / "tables.md").read_text(encoding="utf-8")
    assert not calls and "published vs measured" not in md and not (plain / "paper.csv").exists()
    frame = to_frame(load_records(results).records)
    tables = build_tables(summarise(frame))
    assert render_markdown(tables, 1, None, None) == render_markdown(tables, 1)
    with_paper = render_markdown(tables, 1, None, render_versus(frame, load_paper()))
    lines = iter(with_paper.splitlines())
    assert all(
        any(line == other for other in lines) for line in render_markdown(tables).splitlines()
    )
    assert "## Table 1: published vs measured" in with_paper


def test_unreadable_paper_fails_cleanly(tmp_path: Path, monkeypatch, capsys):
    results = _runs(tmp_path)

    def broken():
        raise ReportError(f"cannot read the published numbers kdbench/paper/{PAPER_FILE}: boom")

    monkeypatch.setattr(cli, "load_paper", broken)
    with pytest.raises(SystemExit) as exc:
        cli.main([str(results), "--out", str(results.parent / "out"), "--no-plots", "--paper"])
    assert exc.value.code == 2
    assert f"{PAPER_FILE}: boom" in capsys.readouterr().err


def test_rank_agreement_is_kendalls_tau_over_the_rows_of_a_task():
    from scipy import stats

    from kdbench.report.versus import rank_agreement

    published = pd.DataFrame(
        {
            "objective": ["a", "b", "c", "d"],
            "paper_init": ["x"] * 4,
            "task": ["sst2"] * 4,
            "mean": [70.0, 72.0, 71.0, 75.0],
            "quoted": [False] * 4,
        }
    )
    measured = pd.DataFrame(
        {
            "objective": ["a", "b", "c", "d"],
            "paper_init": ["x"] * 4,
            "task": ["sst2"] * 4,
            "measured_mean": [60.0, 61.0, 63.0, 62.0],
        }
    )
    tau, p, n = rank_agreement(published, measured, "sst2")
    expected = stats.kendalltau([70, 72, 71, 75], [60, 61, 63, 62])
    assert (tau, p, n) == (pytest.approx(expected.statistic), pytest.approx(expected.pvalue), 4)
    assert math.isnan(rank_agreement(published, measured.iloc[:2], "sst2")[0])
