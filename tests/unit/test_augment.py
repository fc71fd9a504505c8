"""TinyBERT's data augmentation: a real WordPiece tokenizer over a small vocabulary, a tiny random
BERT MLM, and a GloVe-format file whose neighbours are known by hand."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from dataclasses import replace
from pathlib import Path

import datasets
import pytest
import torch
from transformers import AutoTokenizer, BertConfig, BertForMaskedLM

from kdbench.data import augmentation
from kdbench.data.augmentation import augment, augmented_train_set
from kdbench.data.word_candidates import (
    STOP_WORDS,
    Candidates,
    MaskedLMCandidates,
    VectorNeighbours,
    Word,
    words_of,
)
from kdbench.errors import ConfigError, DataError
from kdbench.planning.groups import augment_spec, task_spec
from kdbench.planning.specs import AugmentSpec, ShapeSpec
from tests.helpers import compose_config

WORDS = (
    "film movie story plot actor scene music cast script ending good great bad fine nice dull "
    "funny sad "
    "long short old new the a it was is and very of"
).split()
# Multi-piece words (two word pieces each in this vocabulary) and their hand-made vectors.
PIECES = ["wonder", "##ful", "terr", "##ible", "marvel", "##ous", "sup", "##erb"]
VECTORS = {
    "wonderful": [1, 0, 0],
    "marvelous": [0.9, 0.1, 0],
    "superb": [0.8, 0.3, 0],
    "terrible": [-1, 0, 0],
    "horrible": [-0.9, -0.1, 0],
    "3d": [1, 0, 0],
    ",": [1, 0, 0.01],
}


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    folder = tmp_path_factory.mktemp("wordpiece")
    vocab = [
        "[PAD]",
        "[UNK]",
        "[CLS]",
        "[SEP]",
        "[MASK]",
        ".",
        ",",
        "!",
        "3",
        "##d",
        *WORDS,
        *PIECES,
    ]
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n")
    (folder / "tokenizer_config.json").write_text(
        '{"tokenizer_class": "BertTokenizer", "do_lower_case": true}'
    )
    return AutoTokenizer.from_pretrained(str(folder))


@pytest.fixture(scope="module")
def mlm(tokenizer) -> BertForMaskedLM:
    torch.manual_seed(0)
    config = dict(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    return BertForMaskedLM(BertConfig(**config)).eval()


@pytest.fixture(scope="module")
def glove(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("glove") / "glove.txt"
    path.write_text("".join(f"{w} {' '.join(map(str, v))}\n" for w, v in VECTORS.items()))
    return path


def spec(**changes) -> AugmentSpec:
    values = dict(
        mlm_model="unused",
        mlm_shape=None,
        word_vectors=None,
        n_per_example=8,
        p_replace=0.4,
        top_k=3,
        fields="first",
        batch_size=4,
        seed=7,
    )
    return AugmentSpec(**(values | changes))


def candidates(mlm, tokenizer, glove, top_k=3) -> Candidates:
    return Candidates(
        MaskedLMCandidates(mlm, tokenizer, top_k, 4, progress=False), VectorNeighbours(glove, top_k)
    )


SST2 = task_spec(compose_config(["task=sst2"]).task)
RTE = task_spec(compose_config(["task=rte"]).task)


def sst2(sentences, labels=None) -> datasets.Dataset:
    labels = labels or [i % 2 for i in range(len(sentences))]
    return datasets.Dataset.from_dict(
        {"sentence": sentences, "label": labels, "idx": list(range(len(sentences)))}
    )


SENTENCES = [
    "the film was good , very good .",
    "a wonderful movie and a terrible ending !",
    "Great actor , 3d scene .",
    "it is a long sad story",
]


def test_single_piece_words_get_mlm_candidates_and_multi_piece_words_their_vector_neighbours(
    mlm, tokenizer, glove
):
    found = candidates(mlm, tokenizer, glove).for_texts(["a wonderful film , terrible plot"])[0]
    by_word = {"a wonderful film , terrible plot"[w.start : w.end]: w.candidates for w in found}
    assert set(by_word) == {
        "wonderful",
        "film",
        "terrible",
        "plot",
    }  # "a" is a stop word, "," not alphabetic
    assert by_word["wonderful"] == (
        "marvelous",
        "superb",
        "horrible",
    )  # cosine order; "3d" and "," not words
    assert by_word["terrible"] == ("horrible", "superb", "marvelous")
    vocab = set(tokenizer.get_vocab())
    for word in ("film", "plot"):
        assert len(by_word[word]) == 3 and word not in by_word[word]
        assert all(
            c in vocab and c.isalpha() for c in by_word[word]
        )  # whole words of the MLM's vocabulary


def test_mlm_candidates_are_its_top_predictions_with_the_word_masked(mlm, tokenizer):
    text = "the film was good"
    found = MaskedLMCandidates(mlm, tokenizer, 2, 4, progress=False)([(text, 4, 8)])[0]
    ids = tokenizer(text)["input_ids"]
    position = ids.index(tokenizer.convert_tokens_to_ids("film"))
    ids[position] = tokenizer.mask_token_id
    with torch.no_grad():
        scores = mlm(input_ids=torch.tensor([ids])).logits[0, position]
    allowed = [
        i
        for i, t in enumerate(tokenizer.convert_ids_to_tokens(range(len(tokenizer))))
        if t.isalpha() and t != "film" and i not in tokenizer.all_special_ids
    ]
    best = sorted(allowed, key=lambda i: -scores[i].item())[:2]
    assert found == tuple(tokenizer.convert_ids_to_tokens(best))


def test_counts_labels_and_origins(mlm, tokenizer, glove):
    train = sst2(SENTENCES)
    out = augment(train, SST2, spec(), candidates(mlm, tokenizer, glove))
    assert out["sentence"][:4] == SENTENCES and out["origin"][:4] == [
        0,
        1,
        2,
        3,
    ]  # the originals first
    per_origin = Counter(out["origin"])
    for origin, sentence in enumerate(SENTENCES):
        texts = [s for s, o in zip(out["sentence"], out["origin"], strict=True) if o == origin]
        assert len(texts) == len(set(texts)) == per_origin[origin] <= 1 + 8  # duplicates dropped
        assert texts[0] == sentence
    assert sum(per_origin.values()) == len(out) > 4 + 3 * 8 - 8
    assert all(
        label == train["label"][origin]
        for label, origin in zip(out["label"], out["origin"], strict=True)
    )


def test_stop_words_and_non_alphabetic_tokens_stay(mlm, tokenizer, glove):
    out = augment(
        sst2(["Great actor , 3d scene ."]),
        SST2,
        spec(p_replace=1.0),
        candidates(mlm, tokenizer, glove),
    )
    for text in out["sentence"][1:]:
        words = [w for w, _, _ in words_of(text, tokenizer)]
        assert words[2:4] == [",", "3d"] and words[-1] == "."
        assert (
            words[0] != "Great" and words[0][0].isupper()
        )  # replaced, written Capitalised like the original


def test_replacement_rate_is_p_on_words_with_candidates(mlm, tokenizer, glove):
    sentence = (
        "film movie story plot actor scene music cast "
        "script ending good great bad fine nice dull funny"
    )
    out = augment(
        sst2([sentence]),
        SST2,
        spec(n_per_example=400, p_replace=0.3, top_k=10),
        candidates(mlm, tokenizer, glove, top_k=10),
    )
    original = sentence.split()
    changed = [
        a != b for text in out["sentence"][1:] for a, b in zip(text.split(), original, strict=True)
    ]
    assert len(out) > 390  # 17 words: duplicate copies are rare
    assert abs(sum(changed) / len(changed) - 0.3) < 0.02


def test_same_seed_same_copies_and_subsets_by_original(mlm, tokenizer, glove):
    found = candidates(mlm, tokenizer, glove)
    full = augment(sst2(SENTENCES), SST2, spec(), found)
    assert augment(sst2(SENTENCES), SST2, spec(), found)["sentence"] == full["sentence"]
    assert augment(sst2(SENTENCES), SST2, spec(seed=8), found)["sentence"] != full["sentence"]
    part = augment(sst2(SENTENCES).select([1, 3]), SST2, spec(), found)
    for origin in (1, 3):
        assert [
            s for s, o in zip(part["sentence"], part["origin"], strict=True) if o == origin
        ] == [s for s, o in zip(full["sentence"], full["origin"], strict=True) if o == origin]


def test_pairs_augment_the_first_sentence_unless_all(mlm, tokenizer, glove):
    pairs = datasets.Dataset.from_dict(
        {
            "sentence1": ["the film was good"],
            "sentence2": ["a great movie"],
            "label": [0],
            "idx": [0],
        }
    )
    found = candidates(mlm, tokenizer, glove)
    first = augment(pairs, RTE, spec(p_replace=1.0), found)
    assert set(first["sentence2"]) == {"a great movie"} and len(set(first["sentence1"])) == len(
        first
    )
    every = augment(pairs, RTE, spec(p_replace=1.0, fields="all"), found)
    assert all(s != "a great movie" for s in every["sentence2"][1:])


class OneCandidate:
    """Each word of a text replaced by its upper-case form: copies known by hand."""

    def for_texts(self, texts):
        return [
            [Word(s, e, (w.upper(),)) for w, (s, e) in zip(t.split(), word_spans(t))] for t in texts
        ]


def word_spans(text: str) -> list[tuple[int, int]]:
    spans, start = [], 0
    for word in text.split():
        start = text.index(word, start)
        spans.append((start, start + len(word)))
        start += len(word)
    return spans


def test_pairs_augment_each_sentence_on_its_own_as_released():
    pairs = datasets.Dataset.from_dict(
        {
            "sentence1": ["good film", "bad plot"],
            "sentence2": ["a movie", "dull"],
            "label": [1, 0],
            "idx": [0, 1],
        }
    )
    separate = spec(p_replace=1.0, fields="separate")
    out = augment(pairs, RTE, separate, OneCandidate())
    rows = list(zip(out["sentence1"], out["sentence2"], out["origin"], strict=True))
    assert rows == [
        ("good film", "a movie", 0),
        ("bad plot", "dull", 1),  # the originals first
        ("GOOD FILM", "a movie", 0),
        ("good film", "A MOVIE", 0),  # first's, second's
        ("BAD PLOT", "dull", 1),
        ("bad plot", "DULL", 1),
    ]
    assert out["label"] == [1, 0, 1, 1, 0, 0]
    single = augment(sst2(["good film"]), SST2, separate, OneCandidate())
    assert single["sentence"] == ["good film", "GOOD FILM"]  # one sentence: the same as first


def test_released_n_per_task_is_an_option():
    preset = augment_spec(compose_config(["augment=tinybert"]).augment, "task_specific")
    assert preset.copies_for("mnli") == 20 and preset.fields == "separate"
    assert preset.mlm_with_original
    overrides = ["augment=tinybert", "augment.use_n_per_task=true"]
    released = augment_spec(compose_config(overrides).augment, "task_specific")
    tasks = ("mnli", "qqp", "sst2", "qnli", "cola", "rte", "mrpc", "stsb")
    assert [released.copies_for(t) for t in tasks] == [10, 10, 20, 20, 30, 30, 30, 30]
    three = spec(p_replace=0.5, n_per_example=50, use_n_per_task=True, n_per_task={"sst2": 3})
    out = augment(sst2(["a b c d e f g h"]), SST2, three, OneCandidate())
    assert len(out) <= 1 + 3 and len(out) > 1


def test_the_mlm_reads_the_original_sentence_as_segment_b_as_released(mlm, tokenizer):
    text = "the film was good"
    candidates = MaskedLMCandidates(mlm, tokenizer, 2, 4, progress=False, with_original=True)
    found = candidates([(text, 4, 8)])[0]
    ids = tokenizer(text)["input_ids"]
    position = ids.index(tokenizer.convert_tokens_to_ids("film"))
    masked = list(ids)
    masked[position] = tokenizer.mask_token_id
    pair = masked + ids[1:]  # [CLS] the [MASK] was good [SEP] the film was good [SEP]
    segments = [0] * len(masked) + [1] * (len(ids) - 1)
    with torch.no_grad():
        logits = mlm(input_ids=torch.tensor([pair]), token_type_ids=torch.tensor([segments])).logits
    scores = logits[0, position]
    allowed = [
        i
        for i, t in enumerate(tokenizer.convert_ids_to_tokens(range(len(tokenizer))))
        if t.isalpha() and t != "film" and i not in tokenizer.all_special_ids
    ]
    best = sorted(allowed, key=lambda i: -scores[i].item())[:2]
    assert found == tuple(tokenizer.convert_ids_to_tokens(best))


def test_the_augmented_set_is_built_once_and_cached_by_its_settings(
    mlm, tokenizer, tmp_path, monkeypatch, caplog
):
    built = []
    monkeypatch.setattr(augmentation, "masked_lm", lambda s: (built.append(s) or mlm, tokenizer))
    train = sst2(SENTENCES)
    first, path = augmented_train_set(
        train, SST2, spec(), tmp_path, "here", torch.device("cpu"), progress=False
    )
    again, same = augmented_train_set(
        train, SST2, spec(), tmp_path, "here", torch.device("cpu"), progress=False
    )
    assert same == path and again["sentence"] == first["sentence"] and len(built) == 1
    said = [r.message for r in caplog.records if "no GloVe file" in r.message]
    assert len(said) == 1 and "words of several word pieces stay as they are" in said[0]
    other, elsewhere = augmented_train_set(
        train, SST2, spec(p_replace=0.5), tmp_path, "here", torch.device("cpu")
    )
    assert elsewhere != path and len(built) == 2
    assert not list(tmp_path.glob("augmented/*.tmp"))


def test_a_random_mlm_of_a_shape_has_its_tokenizers_vocabulary(tokenizer):
    shape = ShapeSpec("mlm", 1, 16, 2, 32)
    model, loaded = augmentation.masked_lm(spec(mlm_model=tokenizer.name_or_path, mlm_shape=shape))
    assert (
        model.config.vocab_size == len(loaded) == len(tokenizer)
        and model.config.num_hidden_layers == 1
    )


def test_bad_settings_are_one_line(tmp_path):
    missing = tmp_path / "glove.840B.300d.txt"
    with pytest.raises(
        ConfigError, match="augment.word_vectors=.*does not exist: give a GloVe text file"
    ):
        augment_spec(
            compose_config(["augment=tinybert", f"augment.word_vectors={missing}"]).augment,
            "task_specific",
        )
    with pytest.raises(ConfigError, match=r"augment.p_replace=1.5 must be a number in \[0, 1\]"):
        augment_spec(
            compose_config(["augment=tinybert", "augment.p_replace=1.5"]).augment, "task_specific"
        )
    with pytest.raises(ConfigError, match="needs setting=task_specific"):
        augment_spec(compose_config(["augment=tinybert"]).augment, "task_agnostic")
    assert augment_spec(compose_config([]).augment, "task_specific") is None
    bad = tmp_path / "bad.txt"
    bad.write_text("word 0.1 x\n")
    with pytest.raises(DataError, match="bad.txt:1: not a GloVe line"):
        VectorNeighbours(bad, 3)


def test_the_released_augmentation_reads_the_glove_files_first_words_only(glove, tmp_path):
    # data_augmentation.py's prepare_embedding_retrieval stops at vocab_size=100000 lines: a word
    # below them is neither proposed nor given neighbours
    first_three = VectorNeighbours(glove, 3, limit=3)
    assert first_three("wonderful") == ("marvelous", "superb")
    assert first_three("terrible") == ()
    assert VectorNeighbours(glove, 3)("terrible") == ("horrible", "superb", "marvelous")
    preset = augment_spec(compose_config(["augment=tinybert"]).augment, "task_specific")
    assert preset.word_vectors_limit == 100000
    assert spec().word_vectors_limit is None  # the whole file unless asked
    train = sst2(SENTENCES)
    # the limit is part of an augmented set's key only where a GloVe file is read
    keys = [
        augmentation.cache_key(train, SST2, spec(word_vectors=vectors, word_vectors_limit=n), "")
        for vectors in (None, glove)
        for n in (None, 3)
    ]
    assert keys[0] == keys[1] and keys[2] != keys[3]


def test_an_augmented_sets_key_names_a_users_data_by_its_content():
    train = sst2(SENTENCES)
    keys = [
        augmentation.cache_key(train, replace(SST2, content_hash=content), spec(), "")
        for content in (None, "a", "b")
    ]
    assert "content" not in keys[0] and len({json.dumps(k) for k in keys}) == 3


def test_stop_words_are_lowercase_function_words():
    assert {"the", "a", "is", "and", "not", "nor", "shouldn", "wouldn"} <= STOP_WORDS
    assert "film" not in STOP_WORDS
    # the released list has none of these, although NLTK's has
    assert not {"how", "what", "when", "where", "which", "who", "whom", "why"} & STOP_WORDS


def test_an_augmented_sets_key_names_a_local_mlm_by_its_content(mlm, tokenizer, tmp_path):
    """An MLM folder written again in place proposes other words: a new entry; a copy elsewhere
    names the same one; a Hub id stays itself."""
    train, folder = sst2(SENTENCES), tmp_path / "mlm"
    mlm.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    shutil.copytree(folder, tmp_path / "copy")
    keys = [
        augmentation.cache_key(train, SST2, spec(mlm_model=str(p)), "")
        for p in (folder, tmp_path / "copy")
    ]
    torch.manual_seed(1)
    BertForMaskedLM(mlm.config).save_pretrained(folder)
    again = augmentation.cache_key(train, SST2, spec(mlm_model=str(folder)), "")
    assert again != keys[0] == keys[1]
    assert augmentation.cache_key(train, SST2, spec(), "")["augment"]["mlm_model"] == "unused"
