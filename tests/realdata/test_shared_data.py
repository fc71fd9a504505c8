"""Real GLUE files and the real MiniLM-L6 teacher (run when KDBENCH_GLUE_DIR / KDBENCH_MODELS_DIR
are set)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from kdbench.data.glue import load_split
from kdbench.job import run
from kdbench.metrics import compute_metrics
from kdbench.planning.groups import data_spec, task_spec
from kdbench.tasks import MAJORITY
from tests.helpers import REAL_GLUE, compose_config, realdata

pytestmark = [realdata, pytest.mark.realdata]

OFFICIAL_SIZES = {
    "cola": (8551, 1043),
    "sst2": (67349, 872),
    "mrpc": (3668, 408),
    "stsb": (5749, 1500),
    "rte": (2490, 277),
}


@pytest.mark.parametrize("task", sorted(OFFICIAL_SIZES))
def test_real_glue_files_load_completely(task):
    cfg = compose_config([f"task={task}", f"data.glue_dir={REAL_GLUE}"])
    sizes = tuple(
        len(load_split(task_spec(cfg.task), split, data_spec(cfg.data)))
        for split in ("train", "validation")
    )
    assert sizes == OFFICIAL_SIZES[task]


def test_real_label_ids_follow_hugging_face_order():
    cfg = compose_config(["task=rte", f"data.glue_dir={REAL_GLUE}"])
    dev = load_split(task_spec(cfg.task), "validation", data_spec(cfg.data))
    assert sum(1 for y in dev["label"] if y == 0) == 146  # entailment = 0, as in nyu-mll/glue


def majority_scores(
    labels: list[int], num_labels: int, metrics, suffix: str = ""
) -> dict[str, float]:
    """The task's metrics of a model that predicts the most frequent label everywhere."""
    predictions = np.zeros((len(labels), num_labels))
    predictions[:, Counter(labels).most_common(1)[0][0]] = 1.0
    return compute_metrics(metrics, predictions, np.asarray(labels), suffix)


@pytest.mark.parametrize("task", sorted(set(MAJORITY) - {"mnli"}))
def test_majority_class_scores_recount_from_the_dev_sets(task):
    cfg = compose_config([f"task={task}", f"data.glue_dir={REAL_GLUE}"])
    spec = task_spec(cfg.task)
    labels = list(load_split(spec, "validation", data_spec(cfg.data))["label"])
    assert majority_scores(labels, len(spec.labels), spec.metrics) == pytest.approx(MAJORITY[task])


def test_mnli_matched_majority_recounts_from_its_jsonl():
    path = Path(REAL_GLUE).parent / "glue_derived" / "MNLI" / "dev_matched.jsonl"
    if not path.is_file():
        pytest.skip(f"{path} is not in this copy of the shared data")
    names = ["entailment", "neutral", "contradiction"]
    labels = [
        names.index(json.loads(line)["label"])
        for line in path.read_text().splitlines()
        if line.strip()
    ]
    assert majority_scores(labels, 3, ["accuracy"], "matched") == pytest.approx(MAJORITY["mnli"])


def test_minilm_teacher_distils_on_sst2(tmp_path):
    cfg = compose_config(
        [
            "task=sst2",
            "teacher=minilm_l6",
            "student=3x384",
            "init=layers",
            "init.layers=[2,4,6]",
            "objective=att_kl",
            "data.train_limit=64",
            "data.eval_limit=64",
            "trainer=smoke",
            f"paths.run_dir={tmp_path}",
        ]
    )
    record = run(cfg)
    assert record["status"] == "completed" and record["init"] == "2,4,6"
    assert 0 <= record["score"] <= 100 and record["throughput"]["intermediate_examples_per_s"] > 0
