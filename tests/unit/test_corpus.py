"""Raw-text corpus: readers, packing, the on-disk cache, sharding and MLM masking."""

from __future__ import annotations

import pickle
import random
import string
import threading
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import BertTokenizerFast

from kdbench import corpus
from kdbench.corpus import (
    MaskingCollator,
    MaskingSpec,
    build_packed_corpus,
    input_files,
    is_heldout,
    iter_documents,
    mask_tokens,
    pack_tokens,
    read_text,
    read_wikiextractor,
    shard,
    shard_indices,
    unpack_tokens,
)
from kdbench.errors import ConfigError, DataError

WORDS = ["the", "cat", "dog", "sat", "on", "mat", "ran", "far", "and", "then"]
PAD, UNK, CLS, SEP, MASK = range(5)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *string.ascii_lowercase, *("##" + c for c in string.ascii_lowercase)]
    vocab += [*WORDS, ".", ","]
    path = tmp_path_factory.mktemp("tok") / "vocab.txt"
    path.write_text("\n".join(vocab) + "\n")
    tok = BertTokenizerFast(vocab=str(path))
    assert (tok.cls_token_id, tok.sep_token_id, tok.pad_token_id, tok.mask_token_id) == (CLS, SEP, PAD, MASK)
    return tok


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def make_docs(n: int, seed: int, max_words: int = 30) -> list[str]:
    rng = random.Random(seed)
    docs = []
    for _ in range(n):
        words = [rng.choice(WORDS) if rng.random() < 0.7 else "".join(rng.choices("abcxyz", k=rng.randint(1, 4)))
                 for _ in range(rng.randint(1, max_words))]
        docs.append(" ".join(words) + " .")
    return docs


def doc_tokens(tokenizer, doc: str) -> list[int]:
    return tokenizer(doc, add_special_tokens=False)["input_ids"]


def expected_stream(tokenizer, docs: list[str]) -> list[int]:
    stream: list[int] = []
    for i, doc in enumerate(docs):
        if i:
            stream.append(SEP)
        stream += doc_tokens(tokenizer, doc)
    return stream


# --------------------------------------------------------------------------------------------------- readers


def test_read_text_splits_on_blank_lines(tmp_path):
    text = "\n\n  first line  \nsecond line\t\n\n\n   \n\t\nthird block\r\n\r\nlast block no newline   "
    assert list(read_text(write(tmp_path / "a.txt", text))) == ["first line\nsecond line", "third block", "last block no newline"]


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
    text = WIKI + '<doc id="1" url="u" title="A">\nA\nno close before next\n<doc id="2" url="u" title="B">\nB\n\ntruncated at EOF'
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
    [({"a.txt": "\n\n  \n"}, "text"), ({"a.txt": "plain text, no doc tags"}, "wikiextractor"), ({}, "text")],
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


# --------------------------------------------------------------------------------------------------- packing


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
    np.testing.assert_array_equal(unpack_tokens(rows, final), stream)


def test_pack_tokens_rejects_too_short_sequences():
    with pytest.raises(ConfigError, match="seq_len"):
        pack_tokens(np.arange(5), 2, CLS, SEP, PAD)


def corpus_dir(tmp_path, docs_per_file) -> Path:
    root = tmp_path / "corpus"
    for i, docs in enumerate(docs_per_file):
        write(root / f"part{i}.txt", "\n\n".join(docs) + "\n")
    return root


def split_stream(ds) -> list[int]:
    return unpack_tokens(np.asarray(ds.array), ds.final_length).tolist()


def test_packed_corpus_stores_every_token_in_order(tmp_path, tokenizer):
    long_doc = " ".join(WORDS * 4) + " ."  # 41 tokens: more than 3 sequences of 6 content tokens
    docs_a, docs_b = make_docs(8, seed=1), make_docs(6, seed=2)
    docs_a.insert(3, long_doc)
    docs = docs_a + docs_b
    seq_len = 8
    pc = build_packed_corpus(corpus_dir(tmp_path, [docs_a, docs_b]), "text", tokenizer, seq_len, tmp_path / "cache",
                             heldout_fraction=0.3)
    held = [d for d in docs if is_heldout(d, 0.3)]
    train = [d for d in docs if not is_heldout(d, 0.3)]
    assert held and train and long_doc in train
    assert split_stream(pc.train) == expected_stream(tokenizer, train)
    assert split_stream(pc.heldout) == expected_stream(tokenizer, held)
    assert len(doc_tokens(tokenizer, long_doc)) > 3 * (seq_len - 2)

    for ds in (pc.train, pc.heldout):
        rows = np.asarray(ds.array)
        assert rows.shape[1] == seq_len and (rows[:, 0] == CLS).all() and (rows[:-1, -1] == SEP).all()
        last = ds[len(ds) - 1]
        assert last["attention_mask"].sum().item() == ds.final_length
        assert last["input_ids"][ds.final_length - 1].item() == SEP
        assert (last["input_ids"][ds.final_length :] == PAD).all()
        assert all(ds[i]["attention_mask"].all() for i in range(len(ds) - 1))

    meta = pc.meta
    assert meta["docs"] == len(docs) and meta["docs_without_tokens"] == 0
    assert (meta["splits"]["train"]["docs"], meta["splits"]["heldout"]["docs"]) == (len(train), len(held))
    assert meta["tokens"] == sum(len(doc_tokens(tokenizer, d)) for d in docs)
    assert meta["sequences"] == len(pc) == len(pc.train) + len(pc.heldout)
    assert meta["dtype"] == "uint16" and pc.train.array.dtype == np.uint16


def test_heldout_docs_takes_the_last_documents_and_max_docs_the_first(tmp_path, tokenizer):
    docs = make_docs(10, seed=3)
    root = corpus_dir(tmp_path, [docs])
    pc = build_packed_corpus(root, "text", tokenizer, 16, tmp_path / "cache", heldout_docs=3, max_docs=8)
    assert split_stream(pc.train) == expected_stream(tokenizer, docs[:5])
    assert split_stream(pc.heldout) == expected_stream(tokenizer, docs[5:8])
    assert pc.meta["docs"] == 8


def test_zero_heldout_gives_an_empty_heldout_split(tmp_path, tokenizer):
    pc = build_packed_corpus(corpus_dir(tmp_path, [make_docs(4, seed=4)]), "text", tokenizer, 16, tmp_path / "cache",
                             heldout_fraction=0.0)
    assert len(pc.heldout) == 0 and pc.heldout.array.shape == (0, 16)
    with pytest.raises(IndexError):
        pc.heldout[0]


def test_dataset_items_are_long_tensors_and_pickle(tmp_path, tokenizer):
    pc = build_packed_corpus(corpus_dir(tmp_path, [make_docs(6, seed=5)]), "text", tokenizer, 8, tmp_path / "cache")
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
    [{"seq_len": 2}, {"seq_len": 100_000}, {"heldout_fraction": 0.1, "heldout_docs": 2}, {"heldout_fraction": 1.0},
     {"heldout_docs": -1}, {"max_docs": 0}],
)
def test_bad_build_settings_are_config_errors(tmp_path, tokenizer, kwargs):
    tokenizer_limited = tokenizer
    root = corpus_dir(tmp_path, [["a doc"]])
    if kwargs.get("seq_len") == 100_000:
        tokenizer_limited = SimpleNamespace(model_max_length=512)
    with pytest.raises(ConfigError):
        build_packed_corpus(root, "text", tokenizer_limited, cache_dir=tmp_path / "cache", **kwargs)


def test_all_documents_held_out_is_a_data_error(tmp_path, tokenizer):
    with pytest.raises(DataError, match="held-out"):
        build_packed_corpus(corpus_dir(tmp_path, [make_docs(3, seed=6)]), "text", tokenizer, 8, tmp_path / "cache",
                            heldout_docs=3)
    assert entries(tmp_path / "cache") == []


# ----------------------------------------------------------------------------------------------------- cache


@pytest.fixture
def counting_reader(monkeypatch):
    calls = []

    def reader(path):
        calls.append(path)
        return read_text(path)

    monkeypatch.setitem(corpus.READERS, "text", reader)
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
    """Calling a fast tokenizer rewrites its backend's truncation/padding state; the key must not see it."""
    fresh = BertTokenizerFast(vocab=tokenizer.vocab)
    root, cache = corpus_dir(tmp_path, [make_docs(5, seed=12)]), tmp_path / "cache"
    fresh("warm up", truncation=True, max_length=7, padding="max_length")
    first = build_packed_corpus(root, "text", fresh, 8, cache)
    assert build_packed_corpus(root, "text", fresh, 8, cache).path == first.path
    assert entries(cache) == [first.path.name]


def test_failure_mid_build_leaves_no_partial_entry(tmp_path, tokenizer, monkeypatch):
    root, cache = corpus_dir(tmp_path, [make_docs(5, seed=8)]), tmp_path / "cache"
    real = corpus._write_split
    written = []

    def failing(raw, npy, *args):
        written.append(npy.name)
        if len(written) == 2:  # train.npy is on disk, heldout.npy fails
            raise RuntimeError("disk full")
        return real(raw, npy, *args)

    monkeypatch.setattr(corpus, "_write_split", failing)
    with pytest.raises(RuntimeError, match="disk full"):
        build_packed_corpus(root, "text", tokenizer, 8, cache)
    assert written == ["train.npy", "heldout.npy"]
    assert entries(cache) == []
    monkeypatch.setattr(corpus, "_write_split", real)
    pc = build_packed_corpus(root, "text", tokenizer, 8, cache)
    assert entries(cache) == [pc.path.name]


def test_stale_temp_dir_and_damaged_entry_are_replaced(tmp_path, tokenizer):
    root, cache = corpus_dir(tmp_path, [make_docs(5, seed=9)]), tmp_path / "cache"
    pc = build_packed_corpus(root, "text", tokenizer, 8, cache)
    stale = cache / "corpora" / f".{pc.path.name}.tmp-killed"
    stale.mkdir()
    (pc.path / "train.npy").unlink()
    rebuilt = build_packed_corpus(root, "text", tokenizer, 8, cache)
    assert entries(cache) == [pc.path.name] and split_stream(rebuilt.train) == split_stream(pc.train)


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


# -------------------------------------------------------------------------------------------------- sharding


@pytest.mark.parametrize(("n", "world"), [(0, 2), (1, 3), (10, 1), (10, 3), (17, 4), (8, 8)])
def test_shards_cover_every_index_exactly_once(n, world):
    shards = [list(shard_indices(n, r, world)) for r in range(world)]
    assert sorted(i for s in shards for i in s) == list(range(n))
    assert max(map(len, shards)) - min(map(len, shards)) <= 1
    equal = [len(shard_indices(n, r, world, drop_last=True)) for r in range(world)]
    assert equal == [n // world] * world


def test_shard_returns_a_subset_and_rejects_bad_ranks():
    data = list(range(10))
    assert list(shard(data, 1, 3)) == [1, 4, 7]
    with pytest.raises(ConfigError):
        shard_indices(10, 3, 3)


# --------------------------------------------------------------------------------------------------- masking

VOCAB = 30522
SPEC = MaskingSpec(VOCAB, MASK, (PAD, UNK, CLS, SEP, MASK))


def random_batch(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, VOCAB, (64, 128), generator=g)
    ids[:, 0], ids[:, -1] = CLS, SEP
    ids[:, 40] = SEP
    attention = torch.ones_like(ids)
    ids[::4, 100:] = PAD
    attention[::4, 100:] = 0
    return ids, attention


def test_masking_statistics_follow_bert():
    ids, attention = random_batch()
    masked, labels = mask_tokens(ids, SPEC, generator=torch.Generator().manual_seed(1), attention_mask=attention)
    maskable = ~torch.isin(ids, torch.tensor([PAD, CLS, SEP]))
    chosen = labels != -100
    assert not (chosen & ~maskable).any()
    assert abs(chosen.sum().item() / maskable.sum().item() - 0.15) < 0.01
    assert torch.equal(labels[chosen], ids[chosen])
    assert torch.equal(masked[~chosen], ids[~chosen])
    n = chosen.sum().item()
    as_mask = (masked[chosen] == MASK).sum().item() / n
    kept = (masked[chosen] == ids[chosen]).sum().item() / n
    replaced = 1 - as_mask - kept
    assert abs(as_mask - 0.8) < 0.03 and abs(kept - 0.1) < 0.03 and abs(replaced - 0.1) < 0.03


def test_masking_is_seeded_and_fresh_each_call():
    ids, _ = random_batch()
    before = ids.clone()
    a = mask_tokens(ids, SPEC, generator=torch.Generator().manual_seed(3))
    b = mask_tokens(ids, SPEC, generator=torch.Generator().manual_seed(3))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    g = torch.Generator().manual_seed(3)
    first, second = mask_tokens(ids, SPEC, generator=g), mask_tokens(ids, SPEC, generator=g)
    assert not torch.equal(first[1], second[1])
    assert torch.equal(ids, before)


def test_masking_takes_a_tokenizer_or_explicit_ids(tokenizer):
    ids = torch.randint(5, len(tokenizer), (4, 32), generator=torch.Generator().manual_seed(0))
    ids[:, 0] = CLS
    via_tok = mask_tokens(ids, tokenizer, generator=torch.Generator().manual_seed(0))
    explicit = mask_tokens(ids, vocab_size=len(tokenizer), mask_token_id=MASK, special_ids=[PAD, UNK, CLS, SEP, MASK],
                           generator=torch.Generator().manual_seed(0))
    assert torch.equal(via_tok[0], explicit[0]) and torch.equal(via_tok[1], explicit[1])
    assert (via_tok[1][:, 0] == -100).all()
    with pytest.raises(ConfigError):
        mask_tokens(ids, vocab_size=10)


def test_collator_batches_packed_examples_reproducibly(tmp_path, tokenizer):
    pc = build_packed_corpus(corpus_dir(tmp_path, [make_docs(30, seed=11)]), "text", tokenizer, 16, tmp_path / "cache")
    examples = [pc.train[i] for i in range(len(pc.train))]
    collate = MaskingCollator(tokenizer, seed=5)
    batch = collate(examples)
    assert set(batch) == {"input_ids", "attention_mask", "labels"}
    assert batch["input_ids"].shape == batch["labels"].shape == (len(examples), 16)
    assert (batch["labels"][batch["attention_mask"] == 0] == -100).all()
    assert (batch["labels"][:, 0] == -100).all() and (batch["labels"][:, -1] == -100).all()
    assert torch.equal(MaskingCollator(tokenizer, seed=5)(examples)["labels"], batch["labels"])

    state = collate.state_dict()
    clone = pickle.loads(pickle.dumps(collate))
    nxt = collate(examples)
    assert not torch.equal(nxt["labels"], batch["labels"])
    assert torch.equal(clone(examples)["labels"], nxt["labels"])
    restored = MaskingCollator(tokenizer, seed=0)
    restored.load_state_dict(state)
    assert torch.equal(restored(examples)["labels"], nxt["labels"])


def test_collator_reseeds_per_dataloader_worker(monkeypatch, tokenizer):
    ids = torch.randint(5, len(tokenizer), (16, 64), generator=torch.Generator().manual_seed(0))
    examples = [{"input_ids": row} for row in ids]
    labels = {}
    for worker in (0, 1):
        monkeypatch.setattr(torch.utils.data, "get_worker_info", lambda w=worker: SimpleNamespace(id=w, seed=1000 + w))
        labels[worker] = MaskingCollator(tokenizer, seed=5)(examples)["labels"]
    assert not torch.equal(labels[0], labels[1])
