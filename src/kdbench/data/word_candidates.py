"""The candidates of TinyBERT's word-level replacement (`kdbench.data.augmentation`).

Every word of a text is a candidate for replacement unless it is a stop word or not alphabetic. A
word that is one word piece gets the `top_k` most likely predictions of a masked language model at
its position, masked (`MaskedLMCandidates`); a word of several pieces gets its `top_k` nearest words
by cosine similarity in GloVe vectors (`VectorNeighbours`).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm.auto import tqdm

from kdbench.errors import DataError
from kdbench.models.anatomy import mlm_head
from kdbench.runtime.precision import computing
from kdbench.training.signals import check_stop

# English function words, kept as they are: the alphabetic words of TinyBERT's released list
# (data_augmentation.py's StopWordsList: NLTK's list less what, which, who, whom, when, where, why,
# how).
STOP_WORDS = frozenset(
    """
i me my myself we our ours ourselves you your yours yourself yourselves he him his himself she her
hers herself it its itself they them their theirs themselves this that these those am is are was
were be been being have has had having do does did doing a an the and but if or because as until
while of at by for with about against between into through during before after above below to from
up down in out on off over under again further then once here there all any both each few more most
other some such no nor not only own same so than too very s t can will just don should now d ll m o
re ve y ain aren couldn didn doesn hadn hasn haven isn ma mightn mustn needn shan shouldn wasn
weren won wouldn
""".split()
)


@dataclass(frozen=True)
class Word:
    """A replaceable word of one text field: where it is in the field, and its candidates."""

    start: int
    end: int
    candidates: tuple[str, ...]


def words_of(text: str, tokenizer) -> list[tuple[str, int, int]]:
    """The words of `text` as the MLM tokenizer splits them before word pieces, with their character
    spans."""
    pieces = tokenizer.backend_tokenizer.pre_tokenizer.pre_tokenize_str(text)
    return [(word, start, end) for word, (start, end) in pieces]


def eligible(word: str) -> bool:
    return word.isalpha() and word.lower() not in STOP_WORDS


class MaskedLMCandidates:
    """The `top_k` whole-word predictions of a masked LM for single-piece words, batched over masked
    sentences."""

    def __init__(
        self,
        model,
        tokenizer,
        top_k: int,
        batch_size: int,
        progress: bool,
        with_original: bool = False,
    ):
        self.model, self.tokenizer, self.top_k = model.eval(), tokenizer, top_k
        self.batch_size, self.progress, self.with_original = batch_size, progress, with_original
        vocab = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
        special = set(tokenizer.all_special_ids)
        # Candidates are whole alphabetic words: no word pieces (##x), punctuation or special
        # tokens.
        self.allowed = torch.tensor(
            [i not in special and tok.isalpha() for i, tok in enumerate(vocab)]
        )
        self.vocab = vocab

    def single_pieces(self, words: set[str]) -> set[str]:
        """The words that are one known word piece each (one tokenizer call for all of them)."""
        ordered = sorted(words)
        pieces = self.tokenizer(ordered, add_special_tokens=False)["input_ids"] if ordered else []
        return {
            w
            for w, ids in zip(ordered, pieces, strict=True)
            if len(ids) == 1 and ids[0] != self.tokenizer.unk_token_id
        }

    def __call__(self, queries: list[tuple[str, int, int]]) -> list[tuple[str, ...]]:
        """Candidates for (text, start, end) queries: the word at text[start:end] masked in its own
        text."""
        # Each text is tokenised once for all its words.
        texts = list(dict.fromkeys(text for text, _, _ in queries))
        encoded = (
            self.tokenizer(texts, truncation=True, return_offsets_mapping=True) if texts else {}
        )
        tokens = {
            text: (ids, {tuple(span): i for i, span in enumerate(spans)})
            for text, ids, spans in zip(
                texts, encoded.get("input_ids", []), encoded.get("offset_mapping", []), strict=True
            )
        }
        rows = [self.masked(*tokens[text], (start, end)) for text, start, end in queries]
        out: list[tuple[str, ...]] = [() for _ in queries]
        live = [i for i, row in enumerate(rows) if row is not None]
        for first in tqdm(
            range(0, len(live), self.batch_size),
            desc="augment: MLM candidates",
            disable=not self.progress or not live,
        ):
            check_stop()
            chunk = live[first : first + self.batch_size]
            for i, found in zip(chunk, self.predict([rows[i] for i in chunk]), strict=True):
                out[i] = found
        return out

    def masked(self, ids: list[int], positions: dict, span: tuple[int, int]):
        """(the ids with the word at `span` masked, its position, its id, the segment ids), or None
        when truncation dropped it. `with_original`: the original ids follow the masked ones as
        segment B ([CLS] A' [SEP] A [SEP])."""
        position = positions.get(tuple(span))
        if position is None:
            return None
        masked = list(ids)
        masked[position] = self.tokenizer.mask_token_id
        segments = [0] * len(masked)
        if self.with_original:
            limit = self.model.config.max_position_embeddings
            masked, segments = (masked + ids[1:])[:limit], (segments + [1] * (len(ids) - 1))[:limit]
        return masked, position, ids[position], segments

    @torch.inference_mode()
    def predict(self, rows) -> list[tuple[str, ...]]:
        width = max(len(ids) for ids, _, _, _ in rows)
        pad = self.tokenizer.pad_token_id
        input_ids = torch.tensor([ids + [pad] * (width - len(ids)) for ids, _, _, _ in rows])
        mask = torch.tensor([[1] * len(ids) + [0] * (width - len(ids)) for ids, _, _, _ in rows])
        segments = torch.tensor([types + [0] * (width - len(types)) for _, _, _, types in rows])
        positions = torch.tensor([position for _, position, _, _ in rows])
        device = next(self.model.parameters()).device
        # The encoder on every position, the vocabulary head only at the masked one:
        # [B, H] -> [B, V].
        inputs = {"input_ids": input_ids, "attention_mask": mask, "token_type_ids": segments}
        with computing(device, "fp32", self.model):
            encoded = self.model.base_model(**{k: v.to(device) for k, v in inputs.items()})
        hidden = encoded.last_hidden_state
        masked = hidden[torch.arange(len(rows), device=device), positions.to(device)]
        scores = mlm_head(self.model)(masked).float().cpu()
        scores[:, ~self.allowed] = float("-inf")
        originals = torch.tensor([original for _, _, original, _ in rows])
        scores[torch.arange(len(rows)), originals] = float("-inf")
        top = scores.topk(min(self.top_k, int(self.allowed.sum()) - 1), dim=-1)
        return [
            tuple(
                self.vocab[i]
                for i, s in zip(ids.tolist(), vals.tolist(), strict=True)
                if s > float("-inf")
            )
            for ids, vals in zip(top.indices, top.values, strict=True)
        ]


class VectorNeighbours:
    """The `top_k` nearest alphabetic words by cosine similarity in a GloVe-format text file, of
    its first `limit` words (None: all of them)."""

    def __init__(self, path: Path, top_k: int, limit: int | None = None):
        words, vectors = [], []
        with path.open(encoding="utf-8", errors="replace") as handle:
            for line_number, line in enumerate(itertools.islice(handle, limit), 1):
                parts = line.rstrip().split(" ")
                try:
                    vectors.append([float(v) for v in parts[1:]])
                except ValueError:
                    raise DataError(
                        f"{path}:{line_number}: not a GloVe line (a word, then numbers separated "
                        "by spaces): give augment.word_vectors a GloVe text file"
                    ) from None
                words.append(parts[0])
        if not words or len({len(v) for v in vectors}) != 1:
            raise DataError(
                f"{path} holds no vectors of one dimension: give augment.word_vectors a GloVe text "
                "file"
            )
        matrix = torch.nn.functional.normalize(torch.tensor(vectors), dim=-1)
        self.words, self.matrix, self.top_k = words, matrix, top_k
        # The first of duplicate lines wins.
        self.index = {word: i for i, word in reversed(list(enumerate(words)))}
        self.allowed = torch.tensor([word.isalpha() for word in words])

    def __call__(self, word: str) -> tuple[str, ...]:
        row = self.index.get(word.lower())
        if row is None:
            return ()
        similarity = self.matrix @ self.matrix[row]
        similarity[~self.allowed] = float("-inf")
        similarity[row] = float("-inf")
        top = similarity.topk(min(self.top_k, len(self.words)))
        return tuple(
            self.words[i]
            for i, s in zip(top.indices.tolist(), top.values.tolist(), strict=True)
            if s > float("-inf")
        )


class Candidates:
    """Replaceable words of a text and their candidates: MLM predictions or vector neighbours."""

    def __init__(self, mlm: MaskedLMCandidates, vectors: VectorNeighbours | None):
        self.mlm, self.vectors = mlm, vectors
        self._neighbours: dict[str, tuple[str, ...]] = {}

    def for_texts(self, texts: list[str]) -> list[list[Word]]:
        spans = [
            [(w, s, e) for w, s, e in words_of(text, self.mlm.tokenizer) if eligible(w)]
            for text in texts
        ]
        single = self.mlm.single_pieces({w for found in spans for w, _, _ in found})
        queries = [
            (text, s, e)
            for text, found in zip(texts, spans, strict=True)
            for w, s, e in found
            if w in single
        ]
        predicted = dict(zip(queries, self.mlm(queries), strict=True))
        result = []
        for text, found in zip(texts, spans, strict=True):
            words = []
            for word, start, end in found:
                candidates = predicted.get((text, start, end))
                if candidates is None:
                    candidates = self.neighbours(word)
                if candidates:
                    words.append(Word(start, end, candidates))
            result.append(words)
        return result

    def neighbours(self, word: str) -> tuple[str, ...]:
        if self.vectors is None:
            return ()
        if word.lower() not in self._neighbours:
            self._neighbours[word.lower()] = self.vectors(word)
        return self._neighbours[word.lower()]
