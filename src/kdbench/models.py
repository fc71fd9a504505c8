"""Loading teachers and tokenizers (Hub id or local copy), building students of the teacher's family.

A model is looked for, in order: a local directory given as `name_or_path`; a folder named like the model
under $KDBENCH_MODELS_DIR (`sentence-transformers/all-MiniLM-L6-v2` -> `$KDBENCH_MODELS_DIR/all-MiniLM-L6-v2`);
the Hugging Face Hub. Remote code is never executed.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import torch
from omegaconf import DictConfig
from torch.utils.checkpoint import checkpoint
from transformers import (
    AttentionInterface,
    AutoConfig,
    AutoModel,
    AutoModelForMaskedLM,
    AutoModelForSequenceClassification,
    AutoTokenizer,
    BertConfig,
    PretrainedConfig,
    PreTrainedModel,
)
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from kdbench.errors import ConfigError, ModelNotFoundError

MODELS_DIR_ENV = "KDBENCH_MODELS_DIR"


def resolve_model_path(name_or_path: str) -> str:
    """A local directory for the model if there is one, else the Hub id unchanged."""
    if Path(name_or_path).expanduser().is_dir():
        return str(Path(name_or_path).expanduser())
    models_dir = os.environ.get(MODELS_DIR_ENV)
    if models_dir:
        candidate = Path(models_dir) / name_or_path.rstrip("/").split("/")[-1]
        if candidate.is_dir():
            return str(candidate)
    return name_or_path


def _not_found(name_or_path: str, exc: Exception) -> ModelNotFoundError:
    folder = name_or_path.rstrip("/").split("/")[-1]
    where = os.environ.get(MODELS_DIR_ENV)
    looked = f"${MODELS_DIR_ENV}/{folder} ({where}/{folder})" if where else f"${MODELS_DIR_ENV} (unset)"
    return ModelNotFoundError(
        f"model {name_or_path!r} not found: looked for a local directory, {looked} and the Hugging Face Hub "
        f"({type(exc).__name__}); offline, download it once and point ${MODELS_DIR_ENV} at the folder that "
        f"holds {folder}/, or set the path directly (teacher.name_or_path=/path/to/{folder})"
    )


def load_pretrained(name_or_path: str, num_labels: int) -> PreTrainedModel:
    """A sequence-classification model from a checkpoint (its head new unless the checkpoint has one)."""
    path = resolve_model_path(name_or_path)
    try:
        return AutoModelForSequenceClassification.from_pretrained(
            path, num_labels=num_labels, trust_remote_code=False
        )
    except OSError as exc:
        raise _not_found(name_or_path, exc) from exc


def load_tokenizer(name_or_path: str):
    path = resolve_model_path(name_or_path)
    try:
        return AutoTokenizer.from_pretrained(path, trust_remote_code=False)
    except OSError as exc:
        raise _not_found(name_or_path, exc) from exc


# ----------------------------------------------------------------------------------------------------------------
# The `tiny` teacher: a random BERT from a config and a character-level WordPiece vocabulary, so tests and
# smoke runs need no download at all.

_TINY_VOCAB = (
    ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    + list("abcdefghijklmnopqrstuvwxyz0123456789.,;:!?'\"-()&/$%")
    + ["##" + c for c in "abcdefghijklmnopqrstuvwxyz0123456789"]
)


def tiny_tokenizer(cache_dir: Path):
    """A BERT WordPiece tokenizer over `_TINY_VOCAB`, saved as a tokenizer folder and loaded like any model's."""
    folder = cache_dir / "tiny-tokenizer"
    if not (folder / "tokenizer_config.json").exists():
        tmp = cache_dir / f".tiny-tokenizer.{os.getpid()}.tmp"
        tmp.mkdir(parents=True, exist_ok=True)
        (tmp / "vocab.txt").write_text("\n".join(_TINY_VOCAB) + "\n")
        (tmp / "tokenizer_config.json").write_text('{"tokenizer_class": "BertTokenizer", "do_lower_case": true}')
        try:
            tmp.rename(folder)
        except OSError:  # another process made it first
            shutil.rmtree(tmp, ignore_errors=True)
    return AutoTokenizer.from_pretrained(str(folder))


def tiny_config(shape: DictConfig, num_labels: int) -> BertConfig:
    return BertConfig(
        vocab_size=len(_TINY_VOCAB),
        hidden_size=shape.hidden_size,
        num_hidden_layers=shape.num_layers,
        num_attention_heads=shape.num_heads,
        intermediate_size=shape.ffn_size,
        max_position_embeddings=shape.get("max_positions", 512),
        num_labels=num_labels,
    )


def tiny_teacher(teacher_cfg: DictConfig, num_labels: int, seed: int) -> PreTrainedModel:
    torch.manual_seed(seed)
    return AutoModelForSequenceClassification.from_config(tiny_config(teacher_cfg.shape, num_labels))


def teacher_tokenizer(teacher_cfg: DictConfig, cache_dir: Path):
    if teacher_cfg.get("shape") is not None:
        return tiny_tokenizer(cache_dir)
    return load_tokenizer(teacher_cfg.name_or_path)


def pretrained_teacher(teacher_cfg: DictConfig, num_labels: int, seed: int) -> PreTrainedModel:
    """The teacher before task fine-tuning: from a checkpoint, or built from `shape` (the tiny test teacher)."""
    if teacher_cfg.get("shape") is not None:
        return tiny_teacher(teacher_cfg, num_labels, seed)
    return load_pretrained(teacher_cfg.name_or_path, num_labels)


def teacher_config(teacher_cfg: DictConfig) -> PretrainedConfig:
    """The teacher's architecture config, cheaply (no weights): used to validate before heavy work."""
    if teacher_cfg.get("shape") is not None:
        return tiny_config(teacher_cfg.shape, 2)
    path = resolve_model_path(teacher_cfg.name_or_path)
    try:
        return AutoConfig.from_pretrained(path, trust_remote_code=False)
    except OSError as exc:
        raise _not_found(teacher_cfg.name_or_path, exc) from exc


# ----------------------------------------------------------------------------------------------------------------
# Students and model anatomy


def student_config(teacher_conf: PretrainedConfig, shape: DictConfig, num_labels: int) -> PretrainedConfig:
    """The teacher's config with the student's depth and width: the student is the teacher's model family."""
    config = teacher_conf.__class__.from_dict(teacher_conf.to_dict())
    config.num_hidden_layers = shape.num_layers
    config.hidden_size = shape.hidden_size
    config.num_attention_heads = shape.num_heads
    config.intermediate_size = shape.ffn_size
    config.num_labels = num_labels
    return config


def build_student(teacher_conf: PretrainedConfig, shape: DictConfig, num_labels: int, seed: int) -> PreTrainedModel:
    torch.manual_seed(seed)
    return AutoModelForSequenceClassification.from_config(student_config(teacher_conf, shape, num_labels))


def encoder_layers(model: PreTrainedModel) -> torch.nn.ModuleList:
    """The transformer blocks of a BERT-family encoder (BERT, RoBERTa, ELECTRA, ...)."""
    base = model.base_model
    layers = getattr(getattr(base, "encoder", None), "layer", None)
    if layers is None:
        raise ConfigError(
            f"{type(model).__name__} has no encoder.layer blocks: kdbench supports BERT-family encoders "
            "(BERT, RoBERTa, ELECTRA, ...)"
        )
    return layers


COMPILED_PARTS = ("attention.output", "intermediate", "output")  # a BERT-family block, less its self-attention


def compile_blocks(*models: PreTrainedModel) -> None:
    """`torch.compile` the dense parts of every transformer block, with dynamic shapes (batches vary in length).

    The self-attention stays eager: its query/key/value projections carry the hooks that read features (hooks
    inside a compiled region would not run), and SDPA is already a fused kernel. What is compiled is the
    attention output projection and the feed-forward (dense, GELU, dropout, residual, layer norm), whose
    elementwise steps inductor fuses; identical parts share one compiled graph.
    """
    for model in models:
        for block in encoder_layers(model):
            for name in COMPILED_PARTS:
                part = block.get_submodule(name)
                part.forward = torch.compile(part.forward, dynamic=True)


RECOMPUTED_SDPA = "kdbench_recomputed_sdpa"  # the attention implementation `recompute_attention` registers


def _recomputed_sdpa(module, query, key, value, attention_mask, dropout: float = 0.0, **kwargs):
    """Transformers' SDPA attention, its [B, H, L, L] maps recomputed in backward where it would keep them.

    On CPU, SDPA with dropout runs the unfused kernel, which keeps the softmax output, the dropout mask and the
    dropped probabilities of every layer for backward (about 2.25 maps per layer). Under activation checkpointing
    only q, k, v and the mask are kept, and the maps of one layer at a time are rebuilt in backward from the saved
    RNG state: the same dropout mask, so outputs and gradients are bitwise those of plain SDPA. The fused GPU
    kernels keep no maps (dropout included), so there, and without dropout, this is plain SDPA.
    """
    if dropout > 0 and query.device.type == "cpu" and torch.is_grad_enabled():
        return checkpoint(sdpa_attention_forward, module, query, key, value, attention_mask, dropout=dropout,
                          use_reentrant=False, **kwargs)
    return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, **kwargs)


def prepare_for_training(model: PreTrainedModel, trainer: DictConfig) -> PreTrainedModel:
    """The trainer's memory setting for a model about to be trained: with `trainer.recompute_attention`, its
    attention becomes `_recomputed_sdpa`, with SDPA's form of the padding mask. Not saved with the model."""
    if trainer.recompute_attention:
        AttentionInterface.register(RECOMPUTED_SDPA, _recomputed_sdpa)
        AttentionMaskInterface.register(RECOMPUTED_SDPA, sdpa_mask)
        model.set_attn_implementation(RECOMPUTED_SDPA)
    return model


def embeddings(model: PreTrainedModel) -> torch.nn.Module:
    return model.base_model.embeddings


HEAD_NAMES = ("classifier", "cls", "lm_head")  # sequence classifier, BERT's MLM head, RoBERTa's MLM head


def prediction_head(model: PreTrainedModel) -> dict[str, torch.nn.Module]:
    """The modules above the encoder that the model has: the pooler, a classifier, an MLM head."""
    head = {name: getattr(model, name) for name in HEAD_NAMES if isinstance(getattr(model, name, None), torch.nn.Module)}
    pooler = getattr(model.base_model, "pooler", None)
    if pooler is not None:
        head["pooler"] = pooler
    return head


def mlm_head(model: PreTrainedModel) -> torch.nn.Module:
    """The masked-language-model head (hidden states -> vocabulary logits)."""
    for name in ("cls", "lm_head"):
        if isinstance(getattr(model, name, None), torch.nn.Module):
            return getattr(model, name)
    raise ConfigError(f"{type(model).__name__} has no MLM head: MLM-based objectives need a teacher with one")


def pretrained_encoder(teacher_cfg: DictConfig, seed: int) -> PreTrainedModel:
    """The pre-trained teacher for task-agnostic distillation: with its MLM head when it has one."""
    auto = AutoModelForMaskedLM if teacher_cfg.get("has_mlm_head") else AutoModel
    if teacher_cfg.get("shape") is not None:
        torch.manual_seed(seed)
        return auto.from_config(tiny_config(teacher_cfg.shape, 2))
    path = resolve_model_path(teacher_cfg.name_or_path)
    try:
        return auto.from_pretrained(path, trust_remote_code=False)
    except OSError as exc:
        raise _not_found(teacher_cfg.name_or_path, exc) from exc


def build_mlm_student(
    teacher_conf: PretrainedConfig, shape: DictConfig, seed: int, dropout: float | None = None
) -> PreTrainedModel:
    """A student with an MLM head (saved with save_pretrained, it loads with AutoModel and fine-tunes on GLUE).

    `dropout` (if given) replaces the family's hidden and attention dropout probabilities.
    """
    config = student_config(teacher_conf, shape, num_labels=2)
    if dropout is not None:
        config.hidden_dropout_prob = config.attention_probs_dropout_prob = dropout
    torch.manual_seed(seed)
    return AutoModelForMaskedLM.from_config(config)
