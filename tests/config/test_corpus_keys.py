"""The corpus group's Hub datasets: each entry's keys declared, defaulted and in range, and the
BookCorpus preset's sentences joined into documents."""

from __future__ import annotations

import pytest

from kdbench.errors import ConfigError
from kdbench.planning.groups import corpus_spec
from tests.helpers import compose_config


def hub_corpus(*overrides: str):
    return corpus_spec(compose_config(["corpus=wiki_bookcorpus", *overrides]).corpus)


def test_the_paper_corpus_joins_bookcorpus_sentences_and_keeps_wikipedia_articles_whole():
    wikipedia, bookcorpus = hub_corpus().hf_datasets
    assert (wikipedia.path, wikipedia.rows_per_document) == ("wikimedia/wikipedia", 1)
    assert (bookcorpus.path, bookcorpus.rows_per_document) == ("bookcorpus/bookcorpus", 100)


def test_a_hub_entry_gets_the_declared_defaults():
    (entry,) = hub_corpus("corpus.hf_datasets=[{path: some/dataset}]").hf_datasets
    assert (entry.path, entry.name, entry.split, entry.field, entry.rows_per_document) == (
        "some/dataset",
        None,
        "train",
        "text",
        1,
    )


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            "corpus.hf_datasets.1.rows_per_document=0",
            r"^corpus.hf_datasets.1.rows_per_document=0 must be a positive integer$",
        ),
        (
            "corpus.hf_datasets.1.rows_per_document=ten",
            r"^corpus.hf_datasets.1.rows_per_document='ten' must be a positive integer$",
        ),
        (
            "corpus.hf_datasets.1.rows_per_document=true",
            r"^corpus.hf_datasets.1.rows_per_document=true must be a positive integer$",
        ),
        (
            "+corpus.hf_datasets.1.rows_per_doc=5",
            r"^corpus.hf_datasets.1 has no key rows_per_doc; "
            r"did you mean corpus.hf_datasets.1.rows_per_document\?",
        ),
        (
            "corpus.hf_datasets=[{name: x, rows_per_document: 3}]",
            r"^corpus.hf_datasets.0 lacks the key path: set corpus.hf_datasets.0.path=...$",
        ),
    ],
)
def test_a_bad_hub_entry_is_refused_in_one_line(override, message):
    with pytest.raises(ConfigError, match=message) as refused:
        hub_corpus(override)
    assert "\n" not in str(refused.value)
