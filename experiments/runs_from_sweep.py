"""A sweep folder's records as one ``runs.jsonl`` to commit: one result.json per line, sorted by
job.

Usage: python experiments/runs_from_sweep.py multirun/NAME results/NAME/runs.jsonl

Machine paths do not travel: a path under the sweep folder becomes relative to it, any other
absolute path becomes ``<local>/`` and its last component (for example the fine-tuned teacher's
folder), so ``python -m kdbench.report results/NAME/runs.jsonl --out results/NAME`` regenerates the
report from the file alone.
"""

from __future__ import annotations

import argparse
import json
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep", type=Path)
    parser.add_argument("out", type=Path)
    args = parser.parse_args()
    root = args.sweep.resolve()
    records = [json.loads(path.read_text()) for path in sorted(root.glob(f"*/{RESULT_FILE}"))]
    lines = [json.dumps(portable(record, root)) for record in records]
    args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"{args.out}: {len(records)} records")


if __name__ == "__main__":
    main()
