"""TinyBERT's data augmentation (Jiao et al., 2020, Appendix A, Algorithm 1): word-level
replacement.

Every word of a training sentence is a candidate for replacement unless it is a stop word or not
alphabetic. Its candidates come from the original sentence: a word that is one word piece gets the
`top_k` most likely predictions of a masked language model at its position, masked (many such masked
sentences per forward pass; as released, the original sentence follows the masked one as segment B
unless `mlm_with_original` is false); a word of several pieces gets its `top_k` nearest words by
cosine similarity in GloVe vectors. Each of the `n_per_example` copies replaces every word with
candidates, with probability `p_replace`, by one of them drawn at random; copies equal to the
original or to an earlier copy are dropped. A pair's sentences are augmented each on its own
(`fields=separate`, as released: the first sentence's copies, then the second's, the other sentence
left as it is), together (`all`) or only the first (`first`). The originals come first, labels are
copied, and `origin` names each example's original (its `idx`), so subsetting by original and
augmenting commute.

A copy's randomness is a function of (seed, origin) only: the same original gets the same copies in
any subset.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import shutil
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import datasets
import torch
from filelock import FileLock
from tqdm.auto import tqdm
from transformers import AutoModelForMaskedLM, AutoTokenizer, BertConfig

from kdbench import storage
from kdbench.errors import DataError
from kdbench.models import hub
from kdbench.models.anatomy import encoder_layers, mlm_head
from kdbench.specs import AugmentSpec, TaskSpec
from kdbench.training.signals import check_stop, phase, stop_between

log = logging.getLogger("kdbench")

AUGMENT_CACHE_VERSION = 1
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


# ------------------------------------------------------------------------------------------------
# candidates


def words_of(text: str, tokenizer) -> list[tuple[str, int, int]]:
    """The words of `text` as the MLM tokenizer splits them before word pieces, with their character
    spans."""
    pieces = tokenizer.backend_tokenizer.pre_tokenizer.pre_tokenize_str(text)
    return [(word, start, end) for word, (start, end) in pieces]


def eligible(word: str) -> bool:
    return word.isalpha() and word.lower() not in STOP_WORDS


def match_case(candidate: str, word: str) -> str:
    """The candidate written like the word it replaces: Capitalised, UPPER or as predicted."""
    if word.isupper() and len(word) > 1:
        return candidate.upper()
    if word[0].isupper():
        return candidate[:1].upper() + candidate[1:]
    return candidate


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
        self.model, self.tokenizer, self.top_k, self.batch_size = (
            model.eval(),
            tokenizer,
            top_k,
            batch_size,
        )
        self.progress, self.with_original = progress, with_original
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
        texts = list(
            dict.fromkeys(text for text, _, _ in queries)
        )  # each text tokenised once for all its words
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
        # The encoder on every position, the vocabulary head only at the masked one: [B, H] -> [B,
        # V].
        inputs = {"input_ids": input_ids, "attention_mask": mask, "token_type_ids": segments}
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
    """The `top_k` nearest alphabetic words by cosine similarity in a GloVe-format text file."""

    def __init__(self, path: Path, top_k: int):
        words, vectors = [], []
        with path.open(encoding="utf-8", errors="replace") as handle:
            for line_number, line in enumerate(handle, 1):
                parts = line.rstrip().split(" ")
                try:
                    vectors.append([float(v) for v in parts[1:]])
                except ValueError:
                    raise DataError(
                        f"{path}:{line_number}: not a GloVe line (a word, then numbers separated "
                        "by "
                        "spaces): give augment.word_vectors a GloVe text file"
                    ) from None
                words.append(parts[0])
        if not words or len({len(v) for v in vectors}) != 1:
            raise DataError(
                f"{path} holds no vectors of one dimension: give augment.word_vectors a GloVe text "
                "file"
            )
        matrix = torch.nn.functional.normalize(torch.tensor(vectors), dim=-1)
        self.words, self.matrix, self.top_k = words, matrix, top_k
        self.index = {
            word: i for i, word in reversed(list(enumerate(words)))
        }  # the first of duplicate lines wins
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


# ------------------------------------------------------------------------------------------------
# the copies


def replaced(text: str, words: list[Word], rng: random.Random, p_replace: float) -> str:
    """One copy of `text`: each word with candidates replaced, with probability p_replace, by a
    random one."""
    pieces, cursor = [], 0
    for word in words:
        if rng.random() < p_replace:
            pieces += [
                text[cursor : word.start],
                match_case(rng.choice(word.candidates), text[word.start : word.end]),
            ]
            cursor = word.end
    return "".join(pieces) + text[cursor:]


def copies(
    fields: list[str], words: list[list[Word]], origin: int | str, spec: AugmentSpec
) -> list[list[str]]:
    """The distinct augmented copies of one example's `fields`, none equal to the original;
    `origin` seeds them."""
    rng = random.Random(f"{spec.seed}/{origin}")
    seen, out = {tuple(fields)}, []
    for _ in range(spec.n_per_example):
        copy = [
            replaced(text, found, rng, spec.p_replace)
            for text, found in zip(fields, words, strict=True)
        ]
        if tuple(copy) not in seen:
            seen.add(tuple(copy))
            out.append(copy)
    return out


def field_groups(text_fields: list[str], fields: str) -> list[list[str]]:
    """The text fields each copy changes together: each on its own (separate), all, or the first."""
    if fields == "separate" and len(text_fields) > 1:
        return [[field] for field in text_fields]
    return [list(text_fields if fields == "all" else text_fields[:1])]


def augment(
    train: datasets.Dataset, task: TaskSpec, spec: AugmentSpec, candidates: Candidates
) -> datasets.Dataset:
    """The originals, then their copies: the task's text fields, `label`, `idx` and `origin`."""
    groups = field_groups(list(task.text_fields), spec.fields)
    spec = replace(spec, n_per_example=spec.copies_for(task.name))
    originals = {name: list(train[name]) for name in (*task.text_fields, "label", "idx")}
    found = {field: candidates.for_texts(originals[field]) for group in groups for field in group}
    columns = {name: list(values) for name, values in originals.items()} | {
        "origin": list(originals["idx"])
    }
    for row, origin in enumerate(originals["idx"]):
        for group in groups:
            key = origin if len(groups) == 1 else f"{origin}/{group[0]}"
            fields = [originals[field][row] for field in group]
            for copy in copies(fields, [found[field][row] for field in group], key, spec):
                for field in task.text_fields:
                    kept = originals[field][row]
                    columns[field].append(copy[group.index(field)] if field in group else kept)
                columns["label"].append(originals["label"][row])
                columns["idx"].append(origin)
                columns["origin"].append(origin)
    features = train.features.copy()
    features["origin"] = datasets.Value("int32")
    return datasets.Dataset.from_dict(columns, features=features)


# ------------------------------------------------------------------------------------------------
# the cache


def masked_lm(spec: AugmentSpec):
    """The MLM and its tokenizer: `mlm_model` from a local copy or the Hub, or random of
    `mlm_shape`."""
    tokenizer = hub.load(AutoTokenizer, spec.mlm_model)
    if spec.mlm_shape is None:
        return hub.load(AutoModelForMaskedLM, spec.mlm_model), tokenizer
    torch.manual_seed(spec.seed)
    shape = spec.mlm_shape
    config = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=shape.hidden_size,
        num_hidden_layers=shape.num_layers,
        num_attention_heads=shape.num_heads,
        intermediate_size=shape.ffn_size,
        max_position_embeddings=shape.max_positions,
    )
    return AutoModelForMaskedLM.from_config(config), tokenizer


def cache_key(train: datasets.Dataset, task: TaskSpec, spec: AugmentSpec, source: str) -> dict:
    vectors = spec.word_vectors
    stamp = (
        None
        if vectors is None
        else [str(vectors.resolve()), vectors.stat().st_size, vectors.stat().st_mtime_ns]
    )
    originals = hashlib.sha256(json.dumps(sorted(train["idx"])).encode()).hexdigest()
    return {
        "version": AUGMENT_CACHE_VERSION,
        "task": task.name,
        "source": source,
        "originals": originals,
        "augment": json.loads(json.dumps(asdict(spec), default=str)),
        "word_vectors": stamp,
    }


def augmented_train_set(
    train: datasets.Dataset,
    task: TaskSpec,
    spec: AugmentSpec,
    cache_dir: Path,
    source: str,
    device: torch.device,
    progress: bool = True,
) -> tuple[datasets.Dataset, Path]:
    """The augmented training set and its cache entry, built once (under a lock, written complete or
    not at all)."""
    key = cache_key(train, task, spec, source)
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    path = cache_dir / "augmented" / f"{task.name}-{digest}"
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock"):
        if not storage.intact(path, "the augmented training set's cache entry"):
            build(train, task, spec, path, key, device, progress)
    return datasets.load_from_disk(str(path)), path


def build(
    train, task: TaskSpec, spec: AugmentSpec, path: Path, key: dict, device, progress: bool
) -> None:
    model, tokenizer = masked_lm(spec)
    vectors = (
        VectorNeighbours(spec.word_vectors, spec.top_k) if spec.word_vectors is not None else None
    )
    if vectors is None:
        log.warning(
            "augment: no GloVe file (augment.word_vectors=null): words of several word "
            "pieces stay as they are; give augment.word_vectors a GloVe text file to "
            "replace them too"
        )
    mlm = MaskedLMCandidates(
        model.to(device), tokenizer, spec.top_k, spec.batch_size, progress, spec.mlm_with_original
    )
    log.info(
        "augmenting %d %s examples (%d copies each)",
        len(train),
        task.name,
        spec.copies_for(task.name),
    )
    with phase("augmentation"), stop_between(encoder_layers(model)):
        augmented = augment(train, task, spec, Candidates(mlm, vectors))
    tmp = path.with_name(path.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    with storage.space_for(path, partial=tmp):
        augmented.save_to_disk(str(tmp))
        (tmp / "kdbench_augment.json").write_text(
            json.dumps({"key": key, "examples": len(augmented), "originals": len(train)}, indent=1)
        )
        storage.publish(tmp, path)
