"""GLUE loading from the TSV layout and from Hugging Face datasets gives the same examples and label
ids."""

from __future__ import annotations

import datasets
import pytest

from kdbench.data.batches import make_loader
from kdbench.data.glue import load_hf_split, load_split, schema, subset, tokenize
from kdbench.errors import DataError
from kdbench.planning.groups import data_spec, task_spec
from tests.helpers import compose_config


def task_cfg(name, glue_dir):
    return compose_config([f"task={name}", f"data.glue_dir={glue_dir}"])


@pytest.mark.parametrize("task", ["sst2", "cola", "rte", "stsb", "mrpc"])
def test_tsv_splits_load_with_hf_schema(task, tiny_glue):
    cfg = task_cfg(task, tiny_glue)
    train = load_split(task_spec(cfg.task), "train", data_spec(cfg.data))
    assert len(train) == 48
    assert set(train.column_names) == {*cfg.task.text_fields, "label", "idx"}
    assert train["idx"][:3] == [0, 1, 2]
    if task == "stsb":
        assert train["label"][:3] == [0.0, 1.0, 2.0]
    else:
        assert set(train["label"]) == {0, 1}


def test_string_labels_map_to_hugging_face_ids(tiny_glue):
    cfg = task_cfg("rte", tiny_glue)
    rows = (tiny_glue / "RTE" / "train.tsv").read_text().splitlines()[1:]
    gold = [0 if r.split("\t")[3] == "entailment" else 1 for r in rows]
    assert load_split(task_spec(cfg.task), "train", data_spec(cfg.data))["label"] == gold


def test_cola_has_no_header_and_reads_by_position(tiny_glue):
    cfg = task_cfg("cola", tiny_glue)
    first = (tiny_glue / "CoLA" / "train.tsv").read_text().splitlines()[0].split("\t")
    ds = load_split(task_spec(cfg.task), "train", data_spec(cfg.data))
    assert ds[0]["sentence"] == first[3] and ds[0]["label"] == int(first[1])


def test_mrpc_byte_order_mark_is_ignored(tiny_glue):
    cfg = task_cfg("mrpc", tiny_glue)
    assert len(load_split(task_spec(cfg.task), "validation", data_spec(cfg.data))) == 16


def test_hugging_face_source_gives_the_same_examples(tiny_glue, tmp_path):
    """A local dataset repository laid out like nyu-mll/glue (parquet per config) loads through
    `datasets`."""
    cfg = task_cfg("rte", tiny_glue)
    tsv = load_split(task_spec(cfg.task), "train", data_spec(cfg.data))
    repo = tmp_path / "glue_repo"
    (repo / "rte").mkdir(parents=True)
    tsv.to_parquet(str(repo / "rte" / "train-00000-of-00001.parquet"))
    dev = load_split(task_spec(cfg.task), "validation", data_spec(cfg.data))
    dev.to_parquet(str(repo / "rte" / "validation-00000-of-00001.parquet"))
    (repo / "README.md").write_text(
        "---\nconfigs:\n- config_name: rte\n  data_files:\n  - split: train\n    path: "
        "rte/train-*.parquet\n"
        "  - split: validation\n    path: rte/validation-*.parquet\n---\n"
    )
    hf_cfg = compose_config(["task=rte", f"data.hf_dataset={repo}"])
    hf_cfg.data.glue_dir = None
    hub = load_hf_split(task_spec(hf_cfg.task), "train", str(repo))
    assert hub.to_list() == tsv.to_list()


def test_subset_is_seeded_and_deterministic(tiny_glue):
    cfg = task_cfg("sst2", tiny_glue)
    ds = load_split(task_spec(cfg.task), "train", data_spec(cfg.data))
    a, b = subset(ds, 10, seed=0), subset(ds, 10, seed=0)
    assert a["idx"] == b["idx"] and len(a) == 10 and a["idx"] != list(range(10))
    assert subset(ds, None, seed=0)["idx"] == ds["idx"]


def test_tokenised_batches_are_dynamically_padded(tiny_glue):
    from kdbench.models.tiny import tiny_tokenizer

    cfg = task_cfg("sst2", tiny_glue)
    tokenizer = tiny_tokenizer(tiny_glue / "tok")
    encoded = tokenize(
        load_split(task_spec(cfg.task), "validation", data_spec(cfg.data)),
        task_spec(cfg.task),
        tokenizer,
        128,
    )
    batch = next(iter(make_loader(encoded, tokenizer, 4, shuffle=False)))
    lengths = batch["attention_mask"].sum(1)
    assert (
        batch["input_ids"].shape[1] == lengths.max()
    )  # padded to the longest in the batch, not to 128
    assert set(batch) >= {"input_ids", "attention_mask", "labels", "idx"}


class Pickled:
    """An attribute that counts the times it is pickled."""

    count = 0

    def __reduce__(self):
        Pickled.count += 1
        return (Pickled, ())


def test_tokenising_never_pickles_the_tokenizer_and_names_its_length(tiny_glue):
    from kdbench.models.tiny import tiny_tokenizer

    cfg = task_cfg("sst2", tiny_glue)
    tokenizer = tiny_tokenizer(tiny_glue / "tok")
    tokenizer.probe = Pickled()
    dev = load_split(task_spec(cfg.task), "validation", data_spec(cfg.data))
    short, full = (tokenize(dev, task_spec(cfg.task), tokenizer, n) for n in (8, 128))
    assert Pickled.count == 0
    assert short._fingerprint != full._fingerprint


def test_tsv_columns_are_built_whole_not_value_by_value(tiny_glue, monkeypatch):
    encoded = []
    encode = datasets.Features.encode_column
    monkeypatch.setattr(
        datasets.Features,
        "encode_column",
        lambda self, column, name: encoded.append(name) or encode(self, column, name),
    )
    cfg = task_cfg("stsb", tiny_glue)
    train = load_split(task_spec(cfg.task), "train", data_spec(cfg.data))
    assert encoded == [] and train.features == schema(task_spec(cfg.task))


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (
            "sentence\tlabel\nfine\t1\nbroken-row-without-tab\n",
            ":3: row has 1 tab-separated columns",
        ),
        ("sentence\tlabel\nfine\t7\n", ":2: label '7' is outside the label set"),
        ("text\tlabel\nfine\t1\n", ":1: header lacks column 'sentence'"),
        ("", "is empty"),
        ("sentence\tlabel\n", "has no data rows"),
    ],
)
def test_malformed_tsv_names_file_and_line(tmp_path, content, message):
    (tmp_path / "SST-2").mkdir()
    (tmp_path / "SST-2" / "train.tsv").write_text(content)
    cfg = task_cfg("sst2", tmp_path)
    with pytest.raises(DataError, match=message.replace("(", r"\(").replace("[", r"\[")) as info:
        load_split(task_spec(cfg.task), "train", data_spec(cfg.data))
    assert "train.tsv" in str(info.value)


def test_missing_file_says_how_to_fix(tmp_path):
    cfg = task_cfg("sst2", tmp_path)
    with pytest.raises(DataError, match="missing data file .*SST-2/train.tsv"):
        load_split(task_spec(cfg.task), "train", data_spec(cfg.data))


def test_hub_failure_is_one_clear_error(monkeypatch):
    def offline(*args, **kwargs):
        raise ConnectionError("no route to host")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    cfg = compose_config(["task=sst2"])
    with pytest.raises(DataError, match="KDBENCH_GLUE_DIR"):
        load_hf_split(task_spec(cfg.task), "train", "nyu-mll/glue")
