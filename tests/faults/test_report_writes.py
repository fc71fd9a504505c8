"""The report killed while it writes: each of its files is left whole, the previous version or the
new one, never part of one."""

from __future__ import annotations

import os
import resource
import signal
import stat
import subprocess
import sys
from pathlib import Path

from kdbench.report.cli import main
from kdbench.runtime.storage import atomic_write_text
from tests.unit.report_helpers import write_scores

# The report's command, killed by the kernel (SIGXFSZ, which Python ignores unless told otherwise)
# at its first write past the file-size limit: a process stopped in the middle of a file.
KILLED_MID_WRITE = (
    "import signal, sys; signal.signal(signal.SIGXFSZ, signal.SIG_DFL); "
    "from kdbench.report.cli import main; main(sys.argv[1:])"
)


def files(folder: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in folder.iterdir() if path.is_file()}


def test_a_report_killed_mid_write_leaves_every_file_whole(tmp_path: Path):
    results, out = tmp_path / "runs", tmp_path / "out"
    write_scores(
        results,
        {("rte", "att_kl", "4,8,12"): [70.0, 71.5], ("rte", "hid_seq", "4,8,12"): [66.0, 68.0]},
    )
    args = [str(results), "--out", str(out), "--paper", "--no-plots"]
    assert main(args) == 0
    whole = files(out)
    limit = len(whole["paper.csv"]) // 2  # the published cells: the report's largest csv

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    killed = subprocess.run(
        [sys.executable, "-c", KILLED_MID_WRITE, *args],
        capture_output=True,
        preexec_fn=limited,
        timeout=300,
    )
    assert killed.returncode == -signal.SIGXFSZ, killed.stderr.decode()[-2000:]
    left = {name: data for name, data in files(out).items() if not name.startswith(".")}
    assert left == whole


def test_each_file_is_written_in_utf_8_with_the_mode_open_gives(tmp_path: Path):
    previous = os.umask(0o027)
    try:
        atomic_write_text(tmp_path / "tables.md", "79.7 ± 0.7 †")
    finally:
        os.umask(previous)
    assert (tmp_path / "tables.md").read_bytes() == "79.7 ± 0.7 †".encode()
    assert stat.S_IMODE((tmp_path / "tables.md").stat().st_mode) == 0o640
    assert [path.name for path in tmp_path.iterdir()] == ["tables.md"]
