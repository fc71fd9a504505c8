"""A user's own data, as a practitioner would hand it to kdbench: MRPC's train and dev sets from a
GLUE folder rewritten as two CSV files with their own column and label names, so that kdbench reads
them as `task=custom` (nothing in them says GLUE).

Usage: python experiments/user_csv.py GLUE_DIR OUT_DIR

OUT_DIR/train.csv and OUT_DIR/dev.csv get the columns `first`, `second`, `label` (`paraphrase` or
`different`): pairs of news sentences, asked whether they say the same thing. Then, for example:

    python -m kdbench.advise task=custom task.train_file=OUT_DIR/train.csv \
        task.validation_file=OUT_DIR/dev.csv 'task.text_columns=[first,second]' \
        task.label_column=label task.lr=1e-4 teacher=minilm_l6 student=3x384 advise.budget=2h
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

LABELS = {"1": "paraphrase", "0": "different"}
COLUMNS = ("first", "second", "label")


def rows(tsv: Path) -> list[tuple[str, str, str]]:
    """MRPC's (sentence 1, sentence 2, label name) rows of one split, read as the GLUE file lays
    them out (a header; quality, two ids, two strings; quotes are text)."""
    with tsv.open(encoding="utf-8-sig", newline="") as handle:
        reader = csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE)
        next(reader)
        return [(first, second, LABELS[quality]) for quality, _, _, first, second in reader]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("glue_dir", type=Path, help="a GLUE folder holding MRPC/train.tsv, dev.tsv")
    parser.add_argument("out_dir", type=Path, help="where train.csv and dev.csv are written")
    args = parser.parse_args()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    for split in ("train", "dev"):
        with (args.out_dir / f"{split}.csv").open("w", encoding="utf-8", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(COLUMNS)
            writer.writerows(rows(args.glue_dir / "MRPC" / f"{split}.tsv"))


if __name__ == "__main__":
    main()
