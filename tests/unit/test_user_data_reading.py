"""How a task of the user's own data reads its files: cells and labels as written, the validation
split carved without leaking inputs and in proportion to the classes, every problem named by its
row in the file, and an edited file never read from an old cache."""

from __future__ import annotations

import json
import os
import re

import pytest

from kdbench.data.glue import load_split
from kdbench.errors import DataError
from tests.unit.test_user_data import custom_task


def write(path, text: str):
    path.write_text(text, newline="")
    return path


def carved_task(path, *extra: str):
    return custom_task(f"task.train_file={path}", *extra)


def test_a_carved_validation_split_shares_no_input_with_train(tmp_path):
    rows = [f"text number {i},{'ab'[i % 2]}\n" for i in range(50)] * 2  # each row twice
    task = carved_task(write(tmp_path / "t.csv", "text,label\n" + "".join(rows)))
    train, dev = load_split(task, "train", None), load_split(task, "validation", None)
    assert len(train) + len(dev) == 100 and not set(train["text"]) & set(dev["text"])


@pytest.mark.parametrize("seed", range(5))
def test_a_carved_validation_split_holds_each_class_in_proportion(tmp_path, seed):
    rows = [f"a{i},a\n" for i in range(90)] + [f"b{i},b\n" for i in range(10)]
    path = write(tmp_path / "t.csv", "text,label\n" + "".join(rows))
    task = carved_task(path, "task.validation_fraction=0.2", f"task.split_seed={seed}")
    dev = load_split(task, "validation", None)
    assert sorted(dev["label"]) == [0] * 18 + [1] * 2


def test_a_carved_split_is_the_same_in_every_run(tmp_path):
    rows = [f"t{i},{'abc'[i % 3]}\n" for i in range(60)]
    path = write(tmp_path / "t.csv", "text,label\n" + "".join(rows))
    dev = load_split(carved_task(path), "validation", None)["text"]
    assert load_split(carved_task(path), "validation", None)["text"] == dev


def test_a_missing_label_is_named_by_its_row_in_the_file(tmp_path):
    rows = [f"t{i},{'' if i == 36 else 'ab'[i % 2]}\n" for i in range(100)]
    path = write(tmp_path / "t.csv", "text,label\n" + "".join(rows))
    with pytest.raises(DataError, match=r"t\.csv: row 37 has no label"):
        carved_task(path)


@pytest.mark.parametrize("given", ["task.train_file", "task.dataset_name"])
def test_csv_cells_are_read_as_written(tmp_path, given):
    """`NA`, `None` and `null` are text and labels, and `01` stays `01`; only an empty cell is
    missing: in a file, and in a folder in the Hub's layout."""
    rows = ["None,NA", "null,01", "NA,01", "nan,NA", "N/A,10", "n/a,10"]
    path = write(tmp_path / "train.csv", "text,label\n" + "".join(f"{row}\n" for row in rows))
    named = path if given == "task.train_file" else tmp_path
    task = custom_task(f"{given}={named}", "task.validation_fraction=0.5")
    assert task.labels == ("01", "10", "NA")
    texts = [
        text for split in ("train", "validation") for text in load_split(task, split, None)["text"]
    ]
    assert sorted(texts) == sorted(row.split(",")[0] for row in rows)


def test_a_label_is_its_stripped_text_and_a_blank_one_is_missing(tmp_path):
    path = write(tmp_path / "t.csv", "text,label\na,x\nb, x\nc,y \nd,y\n")
    assert carved_task(path, "task.validation_fraction=0.5").labels == ("x", "y")
    lines = [{"text": "a", "label": "x"}, {"text": "b", "label": " "}, {"text": "c", "label": "y"}]
    jsonl = write(tmp_path / "t.jsonl", "".join(json.dumps(line) + "\n" for line in lines))
    with pytest.raises(DataError, match=r"t\.jsonl: row 2 has no label in column 'label'"):
        carved_task(jsonl)


@pytest.mark.parametrize(
    "name, text",
    [("t.jsonl", '{"text": "", "label": "y"}\n'), ("t.csv", "   ,y\n"), ("t.csv", '"",y\n')],
)
def test_a_blank_text_is_missing_in_every_format(tmp_path, name, text):
    rows = [("a", "x"), ("b", "y"), ("c", "x")]
    if name.endswith(".jsonl"):
        lines = [json.dumps({"text": t, "label": y}) + "\n" for t, y in rows]
    else:
        lines = ["text,label\n", *(f"{t},{y}\n" for t, y in rows)]
    path = write(tmp_path / name, "".join(lines) + text)
    with pytest.raises(DataError, match=rf"{name}: row 4 has no text in column 'text'"):
        carved_task(path)


@pytest.mark.parametrize(
    "name, labels, extra",
    [
        ("t.tsv", ("pos", "neg"), []),
        ("t.csv", ("pos", "neg"), []),
        ("t.csv", ("4.5", "0.5"), ["task.regression=true"]),
    ],
)
def test_a_text_with_an_unclosed_quote_swallowing_rows_is_refused(tmp_path, name, labels, extra):
    delimiter, (high, low) = "\t" if name == "t.tsv" else ",", labels
    rows = [("great", high), ("bad", low), ('"so good', high), ("awful", low), ('fine ok"', high)]
    rows += [(f"text {i}", labels[i % 2]) for i in range(6)]
    lines = [f"text{delimiter}label", *(f"{t}{delimiter}{y}" for t, y in rows)]
    path = write(tmp_path / name, "\n".join(lines) + "\n")
    swallowed = rf"'awful{re.escape(repr(delimiter)[1:-1])}{low}'"
    with pytest.raises(DataError, match=rf"{name}: row 3's text holds the line {swallowed}.*quote"):
        carved_task(path, *extra)


def test_a_quoted_text_of_several_lines_is_one_example(tmp_path):
    lines = '"great, loved it\nwould watch again",pos\nbad,neg\nnice,pos\nmeh,neg\n'
    task = carved_task(
        write(tmp_path / "t.csv", "text,label\n" + lines), "task.validation_fraction=0.5"
    )
    texts = [
        text for split in ("train", "validation") for text in load_split(task, split, None)["text"]
    ]
    assert len(texts) == 4 and "great, loved it\nwould watch again" in texts


@pytest.mark.parametrize("value", ["inf", "nan", "-inf"])
def test_a_regression_label_that_is_not_a_finite_number_is_refused(tmp_path, value):
    path = write(tmp_path / "t.csv", f"text,label\na,1.5\nb,{value}\nc,2.5\n")
    with pytest.raises(DataError, match=rf"row 2 has the label '{value}'.*not a finite number"):
        carved_task(path, "task.regression=true")


# a file's header and its line of each class, in each format
LINES = {
    "t.tsv": ("text\tlabel\n", "{}\tx\n", "{}\ty\n"),
    "t.jsonl": ("", '{{"text": "{}", "label": "x"}}\n', '{{"text": "{}", "label": "y"}}\n'),
    "t.csv": ("text,label\n", "{},x\n", "{},y\n"),
}


@pytest.mark.parametrize("name", LINES)
def test_a_file_that_is_not_utf8_is_one_line_naming_its_byte(tmp_path, name):
    header, *lines = LINES[name]
    text = header + "".join(line.format("a") for line in lines) * 300 + lines[0].format("caf\xe9")
    (tmp_path / name).write_bytes(text.encode("latin-1"))  # past the delimiter's first KB
    extra = ["task.delimiter=','"] if name == "t.csv" else []
    with pytest.raises(DataError, match=r"is not UTF-8 text \(line \d+, byte 0xe9.*re-encode"):
        carved_task(tmp_path / name, *extra)


def test_an_edited_file_that_keeps_its_modification_time_is_read_anew(tmp_path):
    path = write(tmp_path / "t.csv", "text,label\nold one,x\nold two,y\nold 3,x\nold 4,y\n")
    kept = path.stat()
    assert "old one" in load_split(carved_task(path), "train", None)["text"]
    write(path, "text,label\nnew one,x\nnew two,y\nnew 3,x\nnew 4,y\n")
    os.utime(path, ns=(kept.st_atime_ns, kept.st_mtime_ns))  # as cp -p, rsync -t and tar keep it
    assert "new one" in load_split(carved_task(path), "train", None)["text"]


def test_one_distinct_input_cannot_be_carved(tmp_path):
    path = write(tmp_path / "t.csv", "text,label\nsame,0.5\nsame,1.5\n")
    with pytest.raises(DataError, match="1 distinct input: carving a validation split"):
        carved_task(path, "task.regression=true")


def test_a_json_label_column_of_mixed_types_names_its_classes_as_written(tmp_path):
    lines = [{"text": f"t{i}", "label": ["no", "yes", 2][i % 3]} for i in range(12)]
    path = write(tmp_path / "t.jsonl", "".join(json.dumps(line) + "\n" for line in lines))
    assert carved_task(path).labels == ("2", "no", "yes")


def test_a_json_text_column_with_a_number_names_its_row(tmp_path):
    lines = [{"text": "a", "label": "x"}, {"text": 42, "label": "y"}, {"text": "c", "label": "y"}]
    path = write(tmp_path / "t.jsonl", "".join(json.dumps(line) + "\n" for line in lines))
    with pytest.raises(DataError, match=r"'text' mixes text and other values \(row 2 holds 42\)"):
        carved_task(path)


def test_a_given_split_sharing_inputs_with_train_is_warned_of(tmp_path, caplog):
    train = write(
        tmp_path / "train.csv", "text,label\n" + "".join(f"t{i},a\nu{i},b\n" for i in range(5))
    )
    dev = write(tmp_path / "dev.csv", "text,label\nt1,a\nnew,b\nu3,a\n")
    with caplog.at_level("WARNING", logger="kdbench"):
        custom_task(f"task.train_file={train}", f"task.validation_file={dev}")
    assert f"{dev}: 2 of its 3 examples have an input that train" in caplog.text


def test_disjoint_given_splits_are_not_warned_of(tmp_path, caplog):
    train = write(tmp_path / "train.csv", "text,label\nt1,a\nt2,b\n")
    dev = write(tmp_path / "dev.csv", "text,label\nt3,a\nt4,b\n")
    with caplog.at_level("WARNING", logger="kdbench"):
        custom_task(f"task.train_file={train}", f"task.validation_file={dev}")
    assert "optimistic" not in caplog.text


def test_a_folder_of_several_files_per_split_is_read_as_a_dataset(tmp_path):
    for shard in range(2):
        write(tmp_path / f"train-{shard}.csv", f"text,label\nt{shard},01\nu{shard},02\n")
    task = custom_task(f"task.dataset_name={tmp_path}")
    assert task.user_data.dataset_name == str(tmp_path) and not task.user_data.files
