"""Loaders, samplers and tables are built from whole columns: no dataset row is read one at a time
while they are built (`kdbench.data.columns`)."""

from __future__ import annotations

import json

import datasets
import numpy as np
import pytest
import torch

from kdbench.data import columns
from kdbench.data.batches import make_loader
from kdbench.teacher.features import table_bytes


def encoded_set(rows: int, selected: bool = False) -> datasets.Dataset:
    """A tokenised set as `glue.tokenize` leaves it (torch format), optionally a shuffled
    selection of rows (an indices mapping over its table)."""
    lengths = [3 + row % 7 for row in range(rows)]
    encoded = datasets.Dataset.from_dict(
        {
            "input_ids": [[101] * n for n in lengths],
            "attention_mask": [[1] * n for n in lengths],
            "length": lengths,
            "labels": [row % 3 for row in range(rows)],
        }
    )
    if selected:
        encoded = encoded.shuffle(seed=0).select(range(rows // 2))
    encoded.set_format("torch")
    return encoded


@pytest.fixture
def formatted_reads(monkeypatch) -> list:
    """Every read `datasets` formats: one per row indexed or iterated, one per slice."""
    reads = []
    original = datasets.arrow_dataset.format_table

    def counting(table, key, *args, **kwargs):
        reads.append(key)
        return original(table, key, *args, **kwargs)

    monkeypatch.setattr(datasets.arrow_dataset, "format_table", counting)
    return reads


def build(encoded) -> None:
    make_loader(encoded, None, 8, shuffle=True, group_by_length=True)
    make_loader(encoded, None, 8, shuffle=False)
    table_bytes(encoded, type("Conf", (), {"hidden_size": 4}), {1: {"hidden"}}, "fp32")


@pytest.mark.parametrize("selected", [False, True])
def test_building_loaders_and_tables_reads_no_row_at_a_time(formatted_reads, selected):
    reads_by_size = []
    for rows in (40, 400):
        formatted_reads.clear()
        build(encoded_set(rows, selected))
        reads_by_size.append(len(formatted_reads))
    assert reads_by_size[0] == reads_by_size[1] <= 3, reads_by_size


def test_a_lazy_column_row_by_row_is_what_the_spy_counts(formatted_reads):
    torch.as_tensor(encoded_set(40)["length"])
    assert len(formatted_reads) >= 40


@pytest.mark.parametrize("selected", [False, True])
def test_whole_columns_equal_the_rows(selected):
    encoded = encoded_set(30, selected)
    rows = [encoded[i] for i in range(len(encoded))]
    assert columns.column_array(encoded, "length").tolist() == [int(r["length"]) for r in rows]
    assert columns.column_list(encoded, "labels") == [int(r["labels"]) for r in rows]
    plain = {"length": [3, 1, 2]}
    assert np.array_equal(columns.column_array(plain, "length"), [3, 1, 2])
    assert columns.column_list(plain, "length") == [3, 1, 2]


def test_a_json_column_of_mixed_types_reads_as_its_values(tmp_path):
    values = ["yes", 2, None, 'say "hi"', [1]]
    path = tmp_path / "mixed.jsonl"
    path.write_text("".join(json.dumps({"label": value}) + "\n" for value in values))
    mixed = datasets.load_dataset("json", data_files=str(path), split="train")
    assert columns.column_list(mixed, "label") == values
