"""A sweep folder's records as one ``runs.jsonl`` to commit: one result.json per line, sorted by
job.

Usage: python experiments/runs_from_sweep.py multirun/NAME results/NAME/runs.jsonl [--predictions]

Machine paths do not travel: a path under the sweep folder becomes relative to it, any other
absolute path becomes ``<local>/`` and its last component (for example the fine-tuned teacher's
folder), so ``python -m kdbench.report results/NAME/runs.jsonl --out results/NAME`` regenerates the
report from the file alone. With ``--predictions``, each run's per-example predictions file is
copied beside runs.jsonl, to ``runs/TASK-OBJECTIVE-INIT-seedSEED/``, the record's ``run_dir``, so
the report's example-level tests regenerate too.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

from kdbench.records.record import RESULT_FILE


def portable(value, root: Path):
    """`value` with every absolute path in it made relative to `root` or reduced to its name."""
    if isinstance(value, dict):
        return {key: portable(item, root) for key, item in value.items()}
    if isinstance(value, list):
        return [portable(item, root) for item in value]
    if isinstance(value, str) and value.startswith("/"):
        path = Path(value)
        if path.is_relative_to(root):
            return path.relative_to(root).as_posix()
        return f"<local>/{path.name}"
    return value


def with_predictions(record: dict, run: Path, out: Path) -> dict:
    """The record, its predictions file copied to out/runs/NAME/ and its run_dir that folder."""
    named = record.get("predictions")
    if not isinstance(named, str) or not (run / named).is_file():
        return record
    folder = f"runs/{record['task']}-{record['objective']}-{record['init']}-seed{record['seed']}"
    (out / folder).mkdir(parents=True, exist_ok=True)
    shutil.copyfile(run / named, out / folder / named)
    return record | {"run_dir": folder}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sweep", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--predictions", action="store_true", help="copy predictions files")
    args = parser.parse_args(argv)
    root = args.sweep.resolve()
    records = []
    for path in sorted(root.glob(f"*/{RESULT_FILE}")):
        record = portable(json.loads(path.read_text()), root)
        if args.predictions:
            record = with_predictions(record, path.parent, args.out.parent)
        records.append(record)
    lines = [json.dumps(record) for record in records]
    args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"{args.out}: {len(records)} records")


if __name__ == "__main__":
    main()
