"""Concurrent jobs share one teacher build; secrets stay out of records; bad input is refused,
whatever it is."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kdbench.data.glue import load_split
from kdbench.errors import DataError
from kdbench.planning.groups import data_spec, task_spec
from tests.helpers import compose_config, tiny_overrides


def test_two_concurrent_jobs_build_the_teacher_once(tiny_glue, tmp_path):
    env = dict(os.environ, KDBENCH_CACHE=str(tmp_path / "cache"))
    commands = [
        [
            sys.executable,
            "-m",
            "kdbench.run",
            *tiny_overrides(tiny_glue, tmp_path / f"job{i}"),
            f"seed={i}",
            "objective=vanilla_kd",
        ]
        for i in (1, 2)
    ]
    processes = [
        subprocess.Popen(c, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for c in commands
    ]
    for process in processes:
        process.communicate(timeout=300)
        assert process.returncode == 0
    records = [json.loads((tmp_path / f"job{i}" / "result.json").read_text()) for i in (1, 2)]
    built = [r["timing"]["teacher_finetune_s"] > 0 for r in records]
    assert sorted(built) == [False, True]  # one built it, the other waited and reused it
    assert records[0]["teacher_metrics"] == records[1]["teacher_metrics"]
    teachers = [p for p in (tmp_path / "cache" / "teachers").iterdir() if p.is_dir()]
    assert len(teachers) == 1 and not any(p.name.endswith(".tmp") for p in teachers)


def test_secrets_never_reach_records_or_logs(tiny_glue, tmp_path, monkeypatch):
    from kdbench.job import run

    secret = "0123456789abcdef0123456789abcdef01234567"
    monkeypatch.setenv("WANDB_API_KEY", secret)
    monkeypatch.setenv("WANDB_MODE", "offline")
    run(compose_config(tiny_overrides(tiny_glue, tmp_path, "logger=wandb", "objective=vanilla_kd")))
    for path in tmp_path.rglob("*"):
        if path.is_file() and path.stat().st_size < 5_000_000:
            assert secret.encode() not in path.read_bytes(), path
    assert oct((tmp_path).stat().st_mode & 0o777) == "0o700"


ROW = st.lists(
    st.text(
        alphabet=st.characters(blacklist_characters="\t\r\n\x00", blacklist_categories=("Cs",)),
        max_size=12,
    ),
    min_size=0,
    max_size=4,
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(rows=st.lists(ROW, min_size=1, max_size=6))
def test_any_tsv_rows_load_or_fail_with_file_and_line(rows, tmp_path_factory):
    root = tmp_path_factory.mktemp("glue")
    (root / "SST-2").mkdir()
    (root / "SST-2" / "train.tsv").write_text(
        "sentence\tlabel\n" + "".join("\t".join(r) + "\n" for r in rows)
    )
    cfg = compose_config(["task=sst2", f"data.glue_dir={root}"])
    try:
        ds = load_split(task_spec(cfg.task), "train", data_spec(cfg.data))
    except DataError as exc:
        message = str(exc)
        assert "train.tsv:" in message and "\n" not in message
    # every row was well formed: two columns at least and a label in {0, 1, negative, positive}
    else:
        assert all(len(r) >= 2 and r[1].strip() in {"0", "1", "negative", "positive"} for r in rows)
        assert len(ds) == len(rows)
