"""A task of the user's own data (task=custom): what it is, found from the data, and each bad file
refused in one line naming the file and the fix."""

from __future__ import annotations

import csv

import pytest

from kdbench.data.glue import load_split
from kdbench.errors import ConfigError, DataError
from kdbench.planning.groups import task_spec
from kdbench.planning.plan import make_plan
from tests.helpers import compose_config, custom_overrides, tiny_models


def custom_task(*overrides: str):
    return task_spec(compose_config(["task=custom", *overrides]).task)


def reviews(user_data, *extra: str) -> list[str]:
    return [
        f"task.train_file={user_data['csv']}",
        f"task.validation_file={user_data['csv_dev']}",
        "task.text_columns=[review]",
        "task.label_column=sentiment",
        *extra,
    ]


def test_labels_are_inferred_sorted_and_loaded_as_ids(user_data):
    task = custom_task(*reviews(user_data))
    assert task.labels == ("neg", "pos") and task.metrics == ("accuracy",) and task.content_hash
    dev = load_split(task, "validation", None)
    assert set(dev.column_names) == {"review", "label", "idx"} and len(dev) == 12
    with user_data["csv_dev"].open() as handle:
        gold = [task.labels.index(row["sentiment"]) for row in csv.DictReader(handle)]
    assert dev["label"] == gold


def test_a_test_file_is_evaluated_after_the_validation_split(user_data):
    task = custom_task(*reviews(user_data, f"task.test_file={user_data['csv_dev']}"))
    assert task.eval_splits == {"": "validation", "test": "test"}
    assert len(load_split(task, "test", None)) == 12


def test_given_label_names_set_the_ids(user_data):
    task = custom_task(
        *reviews(user_data, "task.label_names=[pos,neg]", "task.metric=[f1,accuracy]")
    )
    assert task.labels == ("pos", "neg") and task.metrics == ("f1", "accuracy")
    assert load_split(task, "train", None)["label"][:2] == [1, 0]  # the rows alternate neg, pos


def test_without_a_validation_file_a_seeded_split_is_carved_from_train(user_data):
    overrides = (
        f"task.train_file={user_data['jsonl']}",
        "task.text_columns=[question,answer]",
        "task.validation_fraction=0.25",
    )
    task = custom_task(*overrides)
    train, dev = load_split(task, "train", None), load_split(task, "validation", None)
    assert len(train) + len(dev) == 40 and task.text_fields == ("question", "answer")
    assert not set(train["answer"]) & set(dev["answer"])  # copies of an input stay together
    again = load_split(custom_task(*overrides), "validation", None)
    assert again["answer"] == dev["answer"]  # the same split
    other = load_split(custom_task(*overrides, "task.split_seed=1"), "validation", None)
    assert other["answer"] != dev["answer"]


@pytest.mark.parametrize("with_validation", [True, False])
def test_a_dataset_in_the_hub_layout_is_read_by_name(user_data, tmp_path, with_validation):
    (tmp_path / "train.csv").write_bytes(user_data["csv"].read_bytes())
    if with_validation:
        (tmp_path / "validation.csv").write_bytes(user_data["csv_dev"].read_bytes())
    task = custom_task(
        f"task.dataset_name={tmp_path}", "task.text_columns=[review]", "task.label_column=sentiment"
    )
    assert task.user_data.carve is not with_validation and task.labels == ("neg", "pos")
    dev = load_split(task, "validation", None)
    assert len(dev) == 12 if with_validation else 0 < len(dev) < 40


def test_a_regression_reads_scores_and_defaults_to_correlations(user_data):
    task = custom_task(
        f"task.train_file={user_data['scores']}",
        "task.text_columns=[first,second]",
        "task.label_column=score",
        "task.regression=true",
    )
    assert task.regression and task.labels == () and task.metrics == ("pearson", "spearman")
    assert load_split(task, "train", None).features["label"].dtype == "float32"


def test_the_content_hash_follows_the_bytes(user_data, tmp_path):
    copy = tmp_path / "reviews.csv"
    copy.write_bytes(user_data["csv"].read_bytes())
    columns = ("task.text_columns=[review]", "task.label_column=sentiment")
    same = custom_task(f"task.train_file={copy}", *columns)
    copy.write_bytes(user_data["csv"].read_bytes().replace(b"very", b"truly"))
    changed = custom_task(f"task.train_file={copy}", *columns)
    assert same.content_hash != changed.content_hash


def scores(fraction: str) -> str:
    """A CSV of 40 real-valued labels: 0<fraction> to 39<fraction>."""
    return "text,label\n" + "".join(f"t{i},{i}{fraction}\n" for i in range(40))


# name: (files to write {name: text}, overrides beyond the files, error type, fragments of the line)
BAD = {
    "missing column": (
        {"t.csv": "text,label\na,x\nb,y\n"},
        ["task.text_columns=[review]"],
        DataError,
        ["t.csv has no column 'review'", "set task.text_columns"],
    ),
    "empty file": ({"t.csv": ""}, [], DataError, ["t.csv is empty", "at least one example"]),
    "header only": ({"t.csv": "text,label\n"}, [], DataError, ["t.csv is empty"]),
    "non-text column": (
        {"t.csv": "text,label\n1,x\n2,y\n"},
        [],
        DataError,
        ["column 'text' holds int64, not text", "task.text_columns"],
    ),
    "single class": (
        {"t.csv": "text,label\na,x\nb,x\n"},
        [],
        DataError,
        ["t.csv has one class only ('x')", "task.regression=true"],
    ),
    "unseen dev label": (
        {"t.csv": "text,label\na,x\nb,y\n", "d.csv": "text,label\nc,z\n"},
        ["task.validation_file={root}/d.csv"],
        DataError,
        ["d.csv has labels that", "t.csv lacks (z)", "add training examples"],
    ),
    "given label names the file lacks": (
        {"t.csv": "text,label\na,x\nb,y\n"},
        ["task.label_names=[x,z]"],
        DataError,
        [
            "t.csv has labels that task.label_names lacks (y)",
            "name every label in task.label_names",
        ],
    ),
    "real-valued labels as classes": (
        {"t.csv": scores(".5"), "d.csv": scores(".25")},
        ["task.validation_file={root}/d.csv"],
        DataError,
        [
            "d.csv has labels that",
            "t.csv lacks (0.25, 1.25, 10.25, 11.25, 12.25, ... 35 more)",
            "task.regression=true",
        ],
    ),
    "a delimiter that does not fit": (
        {"t.csv": "text;label\na, b;x\nc, d, e;y\n"},
        ["task.delimiter=','"],
        DataError,
        ["cannot read", "t.csv with task.delimiter=','", "Expected 2 fields", "set task.delimiter"],
    ),
    "rows longer than the header": (  # pandas would read their first field as an index
        {"t.csv": "text,label\ngreat, loved it,x\nawful, hated it,y\n"},
        [],
        DataError,
        ["t.csv with the delimiter ','", "first row has more fields than its header", "quote"],
    ),
    "a header read with another delimiter": (
        {"t.csv": "text;label\na;x\nb;y\n"},
        ["task.delimiter='|'"],
        DataError,
        ["t.csv has no column 'text' (it has text;label)", "set task.delimiter"],
    ),
    "folder for a file": (
        {},
        ["task.train_file={root}"],
        ConfigError,
        ["is a folder: give a data file"],
    ),
    "missing file": (
        {},
        ["task.train_file={root}/nope.csv"],
        ConfigError,
        ["nope.csv does not exist"],
    ),
    "unknown format": (
        {"t.txt": "a\n"},
        ["task.train_file={root}/t.txt"],
        ConfigError,
        ["t.txt is not a data file"],
    ),
    "f1 of many classes": (
        {"t.csv": "text,label\na,x\nb,y\nc,z\n"},
        ["task.metric=[f1]"],
        ConfigError,
        ["task.metric=f1 is binary F1", "use f1_macro"],
    ),
    "no data": ({}, ["task.train_file=null"], ConfigError, ["task.train_file=... (a file)"]),
}


@pytest.mark.parametrize("case", BAD)
def test_a_bad_file_is_refused_in_one_line_naming_it(case, tmp_path):
    files, extra, error, fragments = BAD[case]
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    overrides = [f"task.train_file={tmp_path / 't.csv'}", *(o.format(root=tmp_path) for o in extra)]
    with pytest.raises(error) as caught:
        custom_task(*overrides)
    message = str(caught.value)
    assert "\n" not in message and all(fragment in message for fragment in fragments), message


def saved_teacher(tmp_path, labels: list[str]):
    """A tiny teacher saved with save_pretrained, naming its classes `labels`."""
    config = compose_config(["teacher=tiny", "student=tiny"])
    teacher, _ = tiny_models(config, num_labels=len(labels))
    teacher.config.id2label = dict(enumerate(labels))
    teacher.config.label2id = {name: i for i, name in enumerate(labels)}
    teacher.save_pretrained(tmp_path / "teacher")
    return tmp_path / "teacher"


def test_a_given_teacher_orders_inferred_labels_by_its_names(user_data, tmp_path):
    teacher = saved_teacher(tmp_path, ["POS", "NEG"])
    plan = make_plan(
        compose_config(
            custom_overrides(tmp_path, *reviews(user_data), f"teacher.finetuned_path={teacher}")
        )
    )
    assert plan.task.labels == ("pos", "neg")


def test_a_teacher_of_other_labels_is_refused(user_data, tmp_path):
    teacher = saved_teacher(tmp_path, ["good", "bad"])
    overrides = custom_overrides(tmp_path, *reviews(user_data), f"teacher.finetuned_path={teacher}")
    with pytest.raises(
        ConfigError, match=r"predicts the labels \['good', 'bad'\] and task custom has"
    ):
        make_plan(compose_config(overrides))


def test_a_real_valued_label_read_as_classes_is_one_short_line(tmp_path):
    (tmp_path / "t.csv").write_text(scores(".5"))
    (tmp_path / "d.csv").write_text(scores(".25"))
    with pytest.raises(DataError) as caught:
        custom_task(
            f"task.train_file={tmp_path / 't.csv'}", f"task.validation_file={tmp_path / 'd.csv'}"
        )
    assert len(str(caught.value).replace(str(tmp_path), "")) < 200 and "known" not in str(
        caught.value
    )


@pytest.mark.parametrize("delimiter", [";", "\t", "|"])
def test_a_delimiter_other_than_a_comma_is_found(tmp_path, delimiter):
    rows = ["text;label", "a, b;x", "c, d, e;y", "f;x"]
    (tmp_path / "t.csv").write_text("".join(row.replace(";", delimiter) + "\n" for row in rows))
    task = custom_task(f"task.train_file={tmp_path / 't.csv'}", "task.validation_fraction=0.5")
    assert task.labels == ("x", "y") and task.user_data.delimiter is None
    assert sorted(
        [*load_split(task, "train", None)["text"], *load_split(task, "validation", None)["text"]]
    ) == ["a, b", "c, d, e", "f"]


def test_an_unreadable_file_is_kdbenchs_line_only(tmp_path, capfd):
    (tmp_path / "t.csv").write_text("text;label\na, b;x\nc, d, e;y\n")
    with pytest.raises(DataError):
        custom_task(f"task.train_file={tmp_path / 't.csv'}", "task.delimiter=','")
    assert "Failed to read file" not in capfd.readouterr().err  # datasets' own log line


def test_one_value_of_a_list_key_is_a_list_of_one(user_data):
    task = custom_task(*reviews(user_data, "task.metric=f1", "task.text_columns=review"))
    assert task.metrics == ("f1",) and task.text_fields == ("review",)


def test_the_content_hash_follows_how_the_data_is_read(user_data):
    """A teacher cached for the labels read as classes is not loaded for them read as scores."""
    columns = (f"task.train_file={user_data['scores']}", "task.text_columns=[first,second]")
    as_classes = custom_task(*columns, "task.label_column=score")
    as_scores = custom_task(*columns, "task.label_column=score", "task.regression=true")
    assert as_classes.content_hash != as_scores.content_hash
