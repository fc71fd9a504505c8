"""Raw-text corpus: readers, packing and the on-disk cache."""

from __future__ import annotations

import pickle
import random
import string
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import BertTokenizerFast

from kdbench.data import corpus_build, readers
from kdbench.data.corpus import build_packed_corpus
from kdbench.data.corpus_build import is_heldout
from kdbench.data.packed import pack_tokens
from kdbench.data.readers import (
    input_files,
    iter_documents,
    read_text,
    read_wikiextractor,
)
from kdbench.data.sources import corpus_files
from kdbench.errors import ConfigError, DataError
from kdbench.planning.groups import corpus_spec
from tests.helpers import compose_config

WORDS = ["the", "cat", "dog", "sat", "on", "mat", "ran", "far", "and", "then"]
PAD, UNK, CLS, SEP, MASK = range(5)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    vocab = [
        "[PAD]",
        "[UNK]",
        "[CLS]",
        "[SEP]",
        "[MASK]",
        *string.ascii_lowercase,
        *("##" + c for c in string.ascii_lowercase),
    ]
    vocab += [*WORDS, ".", ","]
    path = tmp_path_factory.mktemp("tok") / "vocab.txt"
    path.write_text("\n".join(vocab) + "\n")
    tok = BertTokenizerFast(vocab=str(path))
    assert (tok.cls_token_id, tok.sep_token_id, tok.pad_token_id, tok.mask_token_id) == (
        CLS,
        SEP,
        PAD,
        MASK,
    )
    return tok


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def make_docs(n: int, seed: int, max_words: int = 30) -> list[str]:
    rng = random.Random(seed)
    docs = []
    for _ in range(n):
        words = [
            rng.choice(WORDS)
            if rng.random() < 0.7
            else "".join(rng.choices("abcxyz", k=rng.randint(1, 4)))
            for _ in range(rng.randint(1, max_words))
        ]
        docs.append(" ".join(words) + " .")
    return docs


def doc_tokens(tokenizer, doc: str) -> list[int]:
    return tokenizer(doc, add_special_tokens=False)["input_ids"]


def unpack(rows: np.ndarray, final_length: int) -> np.ndarray:
    """The flat token stream that `pack_tokens` packed into `rows` (without [CLS] / [SEP] /
    padding)."""
    if len(rows) == 0:
        return np.empty(0, dtype=rows.dtype)
    body = np.asarray(rows[:-1, 1:-1]).reshape(-1)
    return np.concatenate([body, np.asarray(rows[-1, 1 : final_length - 1])])


def expected_stream(tokenizer, docs: list[str]) -> list[int]:
    stream: list[int] = []
    for i, doc in enumerate(docs):
        if i:
            stream.append(SEP)
        stream += doc_tokens(tokenizer, doc)
    return stream


# ------------------------------------------------------------------------------------------
# readers


def test_read_text_splits_on_blank_lines(tmp_path):
    text = (
        "\n\n  first line  \nsecond line\t\n\n\n   "
        "\n\t\nthird block\r\n\r\nlast block no newline   "
    )
    assert list(read_text(write(tmp_path / "a.txt", text))) == [
        "first line\nsecond line",
        "third block",
        "last block no newline",
    ]


def test_read_text_empty_file_yields_nothing(tmp_path):
    assert list(read_text(write(tmp_path / "a.txt", "\n \n\t\n"))) == []


WIKI = """<doc id="12" url="http://en.wikipedia.org/wiki?curid=12" title="Anarchism">
Anarchism

Anarchism is a political philosophy.
It has many currents.
</doc>
<doc id="39" url="http://en.wikipedia.org/wiki?curid=39" title="The "Weird" Al & 'Friends'">
The "Weird" Al & 'Friends'

Second document body.

</doc>
"""


def test_read_wikiextractor_keeps_title_line_and_skips_empty_lines(tmp_path):
    docs = list(read_wikiextractor(write(tmp_path / "wiki_00", WIKI)))
    assert docs == [
        "Anarchism\nAnarchism is a political philosophy.\nIt has many currents.",
        "The \"Weird\" Al & 'Friends'\nSecond document body.",
    ]


def test_read_wikiextractor_tolerates_missing_closing_tags(tmp_path):
    text = WIKI + (
        '<doc id="1" url="u" title="A">\nA\nno close before '
        'next\n<doc id="2" url="u" title="B">\nB\n\ntruncated at EOF'
    )
    docs = list(read_wikiextractor(write(tmp_path / "wiki_01", text)))
    assert docs[2:] == ["A\nno close before next", "B\ntruncated at EOF"]
    assert len(docs) == 4


def test_read_wikiextractor_ignores_text_outside_docs_and_empty_docs(tmp_path):
    text = 'stray line\n<doc id="1" url="u" title="x">\n\n</doc>\nmore stray\n' + WIKI
    assert len(list(read_wikiextractor(write(tmp_path / "w", text)))) == 2


def test_directory_reading_is_sorted_recursive_and_skips_hidden(tmp_path):
    root = tmp_path / "corpus"
    write(root / "b.txt", "doc b")
    write(root / "a" / "z.txt", "doc a/z")
    write(root / "a" / "b" / "c.txt", "doc a/b/c")
    write(root / ".hidden.txt", "hidden file")
    write(root / ".git" / "x.txt", "hidden dir")
    write(root / "a" / ".swp", "hidden nested")
    files = input_files(root)
    assert [f.relative_to(root).as_posix() for f in files] == ["a/b/c.txt", "a/z.txt", "b.txt"]
    assert list(iter_documents(root, "text")) == ["doc a/b/c", "doc a/z", "doc b"]
    assert list(iter_documents(root / "b.txt", "text")) == ["doc b"]


def test_unknown_format_is_a_config_error_listing_valid_names(tmp_path):
    write(tmp_path / "a.txt", "x")
    with pytest.raises(ConfigError, match="text.*wikiextractor"):
        iter_documents(tmp_path / "a.txt", "jsonl")


def test_missing_path_is_a_data_error(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        iter_documents(tmp_path / "nope", "text")


@pytest.mark.parametrize(
    ("files", "fmt"),
    [
        ({"a.txt": "\n\n  \n"}, "text"),
        ({"a.txt": "plain text, no doc tags"}, "wikiextractor"),
        ({}, "text"),
    ],
)
def test_corpus_without_documents_is_a_data_error(tmp_path, files, fmt):
    root = tmp_path / "c"
    root.mkdir()
    for name, text in files.items():
        write(root / name, text)
    with pytest.raises(DataError, match=str(root)):
        list(iter_documents(root, fmt))


def test_invalid_utf8_is_a_data_error(tmp_path):
    (tmp_path / "a.txt").write_bytes(b"ok\n\n\xff\xfe bad")
    with pytest.raises(DataError, match="UTF-8"):
        list(iter_documents(tmp_path / "a.txt", "text"))


# ------------------------------------------------------------------------------------------
# packing


@settings(max_examples=60, deadline=None)
@given(n=st.integers(0, 60), seq_len=st.integers(3, 12))
def test_pack_tokens_layout_and_roundtrip(n, seq_len):
    stream = np.arange(10, 10 + n, dtype=np.int32)
    rows, final = pack_tokens(stream, seq_len, CLS, SEP, PAD)
    assert rows.shape == (-(-n // (seq_len - 2)), seq_len)
    if n:
        assert (rows[:, 0] == CLS).all()
        assert (rows[:-1, -1] == SEP).all()
        assert rows[-1, final - 1] == SEP and (rows[-1, final:] == PAD).all()
        assert final == seq_len or final == n % (seq_len - 2) + 2
    np.testing.assert_array_equal(unpack(rows, final), stream)


def test_pack_tokens_rejects_too_short_sequences():
    with pytest.raises(ConfigError, match="seq_len"):
        pack_tokens(np.arange(5), 2, CLS, SEP, PAD)


def corpus_dir(tmp_path, docs_per_file) -> Path:
    root = tmp_path / "corpus"
    for i, docs in enumerate(docs_per_file):
        write(root / f"part{i}.txt", "\n\n".join(docs) + "\n")
    return root


def split_stream(ds) -> list[int]:
    return unpack(np.asarray(ds.array), ds.final_length).tolist()


def test_packed_corpus_stores_every_token_in_order(tmp_path, tokenizer):
    long_doc = " ".join(WORDS * 4) + " ."  # 41 tokens: more than 3 sequences of 6 content tokens
    docs_a, docs_b = make_docs(8, seed=1), make_docs(6, seed=2)
    docs_a.insert(3, long_doc)
    docs = docs_a + docs_b
    seq_len = 8
    pc = build_packed_corpus(
        corpus_dir(tmp_path, [docs_a, docs_b]),
        "text",
        tokenizer,
        seq_len,
        tmp_path / "cache",
        heldout_fraction=0.3,
    )
    held = [d for d in docs if is_heldout(doc_tokens(tokenizer, d), 0.3)]
    train = [d for d in docs if not is_heldout(doc_tokens(tokenizer, d), 0.3)]
    assert held and train and long_doc in train
    assert split_stream(pc.train) == expected_stream(tokenizer, train)
    assert split_stream(pc.heldout) == expected_stream(tokenizer, held)
    assert len(doc_tokens(tokenizer, long_doc)) > 3 * (seq_len - 2)

    for ds in (pc.train, pc.heldout):
        rows = np.asarray(ds.array)
        assert (
            rows.shape[1] == seq_len and (rows[:, 0] == CLS).all() and (rows[:-1, -1] == SEP).all()
        )
        last = ds[len(ds) - 1]
        assert last["attention_mask"].sum().item() == ds.final_length
        assert last["input_ids"][ds.final_length - 1].item() == SEP
        assert (last["input_ids"][ds.final_length :] == PAD).all()
        assert all(ds[i]["attention_mask"].all() for i in range(len(ds) - 1))

    meta = pc.meta
    assert meta["docs"] == len(docs) and meta["docs_without_tokens"] == 0
    assert (meta["splits"]["train"]["docs"], meta["splits"]["heldout"]["docs"]) == (
        len(train),
        len(held),
    )
    assert meta["tokens"] == sum(len(doc_tokens(tokenizer, d)) for d in docs)
    assert meta["sequences"] == len(pc) == len(pc.train) + len(pc.heldout)
    assert meta["dtype"] == "uint16" and pc.train.array.dtype == np.uint16


def split_documents(ds) -> set[tuple[int, ...]]:
    """The documents of a split, as the token ids the model reads."""
    stream = split_stream(ds)
    cuts = [-1, *(i for i, token in enumerate(stream) if token == SEP), len(stream)]
    return {tuple(stream[a + 1 : b]) for a, b in zip(cuts, cuts[1:])}


def test_documents_that_tokenise_alike_share_a_split(tmp_path, tokenizer):
    """Copies of a document that differ only in what the (uncased) tokenizer drops, case and
    spacing, are one document to the model: never in both splits."""
    docs = [d for d in make_docs(30, seed=7) for d in (d, d.upper(), d.replace(" ", "   "))]
    pc = build_packed_corpus(
        corpus_dir(tmp_path, [docs]), "text", tokenizer, 8, tmp_path / "cache", heldout_fraction=0.5
    )
    train, held = split_documents(pc.train), split_documents(pc.heldout)
    assert train and held and not train & held


def test_max_docs_keeps_the_first_documents(tmp_path, tokenizer):
    docs = make_docs(10, seed=3)
    root = corpus_dir(tmp_path, [docs])
    pc = build_packed_corpus(
        root, "text", tokenizer, 16, tmp_path / "cache", heldout_fraction=0.3, max_docs=8
    )
    assert split_stream(pc.train) == expected_stream(
        tokenizer, [d for d in docs[:8] if not is_heldout(doc_tokens(tokenizer, d), 0.3)]
    )
    assert split_stream(pc.heldout) == expected_stream(
        tokenizer, [d for d in docs[:8] if is_heldout(doc_tokens(tokenizer, d), 0.3)]
    )
    assert pc.meta["docs"] == 8


def test_zero_heldout_gives_an_empty_heldout_split(tmp_path, tokenizer):
    pc = build_packed_corpus(
        corpus_dir(tmp_path, [make_docs(4, seed=4)]),
        "text",
        tokenizer,
        16,
        tmp_path / "cache",
        heldout_fraction=0.0,
    )
    assert len(pc.heldout) == 0 and pc.heldout.array.shape == (0, 16)
    with pytest.raises(IndexError):
        pc.heldout[0]


def test_dataset_items_are_long_tensors_and_pickle(tmp_path, tokenizer):
    pc = build_packed_corpus(
        corpus_dir(tmp_path, [make_docs(6, seed=5)]), "text", tokenizer, 8, tmp_path / "cache"
    )
    item = pc.train[-1]
    assert set(item) == {"input_ids", "attention_mask"}
    assert item["input_ids"].dtype == torch.long and item["attention_mask"].dtype == torch.long
    assert item["input_ids"].shape == (8,)
    clone = pickle.loads(pickle.dumps(pc.train))
    assert torch.equal(clone[0]["input_ids"], pc.train[0]["input_ids"])
    with pytest.raises(IndexError):
        pc.train[len(pc.train)]


@pytest.mark.parametrize(
    "kwargs",
    [{"seq_len": 2}, {"seq_len": 100_000}, {"heldout_fraction": 1.0}, {"max_docs": 0}],
)
def test_bad_build_settings_are_config_errors(tmp_path, tokenizer, kwargs):
    tokenizer_limited = tokenizer
    root = corpus_dir(tmp_path, [["a doc"]])
    if kwargs.get("seq_len") == 100_000:
        tokenizer_limited = SimpleNamespace(model_max_length=512)
    with pytest.raises(ConfigError):
        build_packed_corpus(
            root,
            "text",
            tokenizer_limited,
            **{"seq_len": 128, "cache_dir": tmp_path / "cache", **kwargs},
        )


def test_all_documents_held_out_is_a_data_error(tmp_path, tokenizer):
    docs = make_docs(3, seed=6)
    assert all(is_heldout(doc_tokens(tokenizer, d), 0.999) for d in docs)
    with pytest.raises(DataError, match="held-out"):
        build_packed_corpus(
            corpus_dir(tmp_path, [docs]),
            "text",
            tokenizer,
            8,
            tmp_path / "cache",
            heldout_fraction=0.999,
        )
    assert entries(tmp_path / "cache") == []


# ------------------------------------------------------------------------------------------
# cache


@pytest.fixture
def counting_reader(monkeypatch):
    calls = []

    def reader(path):
        calls.append(path)
        return read_text(path)

    monkeypatch.setitem(readers.READERS, "text", reader)
    return calls


def entries(cache: Path) -> list[str]:
    return sorted(p.name for p in (cache / "corpora").iterdir() if not p.name.endswith(".lock"))


def test_second_build_reuses_the_cache(tmp_path, tokenizer, counting_reader):
    root, cache = corpus_dir(tmp_path, [make_docs(5, seed=7)]), tmp_path / "cache"
    first = build_packed_corpus(root, "text", tokenizer, 8, cache)
    assert len(counting_reader) == 1
    second = build_packed_corpus(root, "text", tokenizer, 8, cache)
    assert len(counting_reader) == 1 and second.path == first.path and second.meta == first.meta
    third = build_packed_corpus(root, "text", tokenizer, 16, cache)
    assert len(counting_reader) == 2 and third.path != first.path
    write(root / "part0.txt", "changed text\n")
    assert build_packed_corpus(root, "text", tokenizer, 8, cache).path != first.path
    assert len(counting_reader) == 3 and len(entries(cache)) == 3


def test_cache_key_ignores_tokenizer_call_state(tmp_path, tokenizer):
    """Calling a fast tokenizer rewrites its backend's truncation/padding state; the key must not
    see it."""
    fresh = BertTokenizerFast(vocab=tokenizer.vocab)
    root, cache = corpus_dir(tmp_path, [make_docs(5, seed=12)]), tmp_path / "cache"
    fresh("warm up", truncation=True, max_length=7, padding="max_length")
    first = build_packed_corpus(root, "text", fresh, 8, cache)
    assert build_packed_corpus(root, "text", fresh, 8, cache).path == first.path
    assert entries(cache) == [first.path.name]


def test_failure_mid_build_leaves_no_partial_entry(tmp_path, tokenizer, monkeypatch):
    root, cache = corpus_dir(tmp_path, [make_docs(5, seed=8)]), tmp_path / "cache"
    real = corpus_build._write_split
    written = []

    def failing(raw, npy, *args):
        written.append(npy.name)
        if len(written) == 2:  # train.npy is on disk, heldout.npy fails
            raise RuntimeError("disk full")
        return real(raw, npy, *args)

    monkeypatch.setattr(corpus_build, "_write_split", failing)
    with pytest.raises(RuntimeError, match="disk full"):
        build_packed_corpus(root, "text", tokenizer, 8, cache)
    assert written == ["train.npy", "heldout.npy"]
    assert entries(cache) == []
    monkeypatch.setattr(corpus_build, "_write_split", real)
    pc = build_packed_corpus(root, "text", tokenizer, 8, cache)
    assert entries(cache) == [pc.path.name]


def test_stale_temp_dir_and_damaged_entry_are_replaced(tmp_path, tokenizer):
    root, cache = corpus_dir(tmp_path, [make_docs(5, seed=9)]), tmp_path / "cache"
    pc = build_packed_corpus(root, "text", tokenizer, 8, cache)
    stale = cache / "corpora" / f".{pc.path.name}.tmp-killed"
    stale.mkdir()
    (pc.path / "train.npy").unlink()
    rebuilt = build_packed_corpus(root, "text", tokenizer, 8, cache)
    assert entries(cache) == [pc.path.name] and split_stream(rebuilt.train) == split_stream(
        pc.train
    )


def test_concurrent_builders_build_once(tmp_path, tokenizer, counting_reader):
    root, cache = corpus_dir(tmp_path, [make_docs(20, seed=10)]), tmp_path / "cache"
    results, errors = [], []

    def build():
        try:
            results.append(build_packed_corpus(root, "text", tokenizer, 8, cache))
        except Exception as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=build) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(results) == 3
    assert len(counting_reader) == 1 and len({r.path for r in results}) == 1


# ------------------------------------------------------------------------------------------
# Hub datasets


def hub_text(
    tmp_path, monkeypatch, rows: list[str], rows_per_document: int, column: str = "text"
) -> Path:
    """The local text file a Hub corpus of one dataset (`rows` in its `column`, stubbed) is
    written to."""

    def load_dataset(path, name=None, split="train", streaming=False):
        return iter([{"id": i, column: row} for i, row in enumerate(rows)])

    monkeypatch.setitem(sys.modules, "datasets", SimpleNamespace(load_dataset=load_dataset))
    entry = f"{{path: bookcorpus/bookcorpus, rows_per_document: {rows_per_document}}}"
    cfg = compose_config(["corpus=wiki_bookcorpus", f"corpus.hf_datasets=[{entry}]"])
    path, fmt = corpus_files(corpus_spec(cfg.corpus), tmp_path / "cache")
    assert fmt == "text"
    return path


def test_hub_sentence_rows_are_packed_and_held_out_as_documents_of_rows_per_document(
    tmp_path, tokenizer, monkeypatch
):
    sentences = make_docs(95, seed=5, max_words=8)
    rows = sentences[:7] + ["", "  \n "] + sentences[7:]  # empty rows belong to no document
    path = hub_text(tmp_path, monkeypatch, rows, 10)
    docs = ["\n".join(sentences[i : i + 10]) for i in range(0, 95, 10)]  # the last of 5 rows
    pc = build_packed_corpus(path, "text", tokenizer, 16, tmp_path / "cache", heldout_fraction=0.3)
    held = [d for d in docs if is_heldout(doc_tokens(tokenizer, d), 0.3)]
    train = [d for d in docs if not is_heldout(doc_tokens(tokenizer, d), 0.3)]
    assert held and train and pc.meta["docs"] == len(docs) == 10
    assert split_stream(pc.train) == expected_stream(tokenizer, train)
    assert split_stream(pc.heldout) == expected_stream(tokenizer, held)


def test_hub_text_of_other_rows_per_document_is_another_cache_entry(tmp_path, monkeypatch):
    rows = make_docs(6, seed=6)
    whole, joined = (hub_text(tmp_path, monkeypatch, rows, n) for n in (1, 3))
    assert whole != joined
    assert whole.read_text() == "".join(f"{row}\n\n" for row in rows)
    first, second = "\n".join(rows[:3]), "\n".join(rows[3:])
    assert joined.read_text() == f"{first}\n\n{second}\n\n"


def test_a_hub_dataset_without_the_text_column_names_its_columns(tmp_path, monkeypatch):
    with pytest.raises(
        DataError, match=r"bookcorpus/bookcorpus has no column 'text' \(it has id, "
    ):
        hub_text(tmp_path, monkeypatch, ["a sentence"], 1, column="sentence")
