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
from filelock import FileLock
from safetensors import SafetensorError, safe_open
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

from kdbench import storage
from kdbench.errors import ConfigError, ModelNotFoundError
from kdbench.record import CHAIN_FILE, write_json
from kdbench.specs import InitSpec, ShapeSpec, TeacherSpec

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


def load(auto, name_or_path: str | Path, *, saved_as: str | None = None, **kwargs):
    """`auto.from_pretrained` (a model, config or tokenizer class) from a local copy if there is one, else the
    Hub; remote code never runs. A failure is one line: where it looked, or, for a folder kdbench wrote
    (`saved_as` names what it should hold), which file is damaged or what to give instead."""
    path = str(name_or_path) if saved_as else resolve_model_path(str(name_or_path))
    try:
        return auto.from_pretrained(path, trust_remote_code=False, **kwargs)
    except (OSError, ValueError, SafetensorError) as exc:
        if Path(path).is_dir():
            check_saved_model(Path(path), str(name_or_path))
        if saved_as:
            raise ModelNotFoundError(f"cannot load {saved_as} from {path} ({type(exc).__name__}): give a directory "
                                     "written by save_pretrained with the task's number of labels") from exc
        if Path(path).is_dir():
            raise ModelNotFoundError(f"the model folder {path} cannot be loaded ({type(exc).__name__}: {reason(exc)}): "
                                     "give a folder written by save_pretrained (config.json, the weights, the "
                                     "tokenizer's files) or a Hub id") from exc
        raise _not_found(str(name_or_path), exc) from exc


def reason(exc: Exception, limit: int = 160) -> str:
    """The first line of an exception's message, shortened: enough to say what was wrong in one line."""
    first = next((line.strip() for line in str(exc).splitlines() if line.strip()), "")
    return first if len(first) <= limit else first[: limit - 3] + "..."


def check_saved_model(folder: Path, what: str) -> None:
    """A model folder that cannot be rebuilt, checked cheaply before use: against its manifest when kdbench wrote
    it, and every safetensors file's header; a damaged file is refused with one line naming it."""
    storage.check_saved(folder, what)
    for weights in sorted(folder.glob("*.safetensors")):
        try:
            with safe_open(str(weights), framework="pt"):
                pass
        except (OSError, SafetensorError) as exc:
            raise ModelNotFoundError(f"cannot load {what}: {weights} is damaged ({type(exc).__name__}, cut short or "
                                     "overwritten); copy or save it again") from None


def saved_config(folder: Path, what: str) -> PretrainedConfig:
    """The config of a saved model that cannot be rebuilt, after checking its files (`check_saved_model`)."""
    check_saved_model(folder, what)
    return load(AutoConfig, folder, saved_as=what)


PROJECTIONS_FILE = "projections.pt"


def save_student(student: PreTrainedModel, tokenizer, folder: Path, chain: tuple[str, ...], *,
                 labels: tuple[str, ...] = (), card: str | None = None,
                 projections: dict | None = None) -> None:
    """The student, its tokenizer and its distillation chain in `folder`, sealed with a manifest (so a copy cut
    short is refused by name when it is loaded), written whole or not at all. `labels` name its
    classes (its id2label, which `pipeline` predicts); `card` is its model card (README.md);
    `projections`: the objective's learnt W_e/W_h (`Objective.projections.state_dict()`), kept for a
    later stage that carries them."""
    if labels:
        student.config.id2label = dict(enumerate(labels))
        student.config.label2id = {name: i for i, name in enumerate(labels)}
    tmp = folder.with_name(f".{folder.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    with storage.space_for(folder, storage.tensor_bytes(student.state_dict()), partial=tmp):
        student.save_pretrained(str(tmp))
        tokenizer.save_pretrained(str(tmp))
        write_json(tmp / CHAIN_FILE, {"chain": list(chain)})
        if card is not None:
            (tmp / "README.md").write_text(card)
        if projections:
            torch.save(projections, tmp / PROJECTIONS_FILE)
        if folder.exists():
            shutil.rmtree(folder)
        storage.publish(tmp, folder)


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
    cache_dir.mkdir(parents=True, exist_ok=True)
    with FileLock(str(folder) + ".lock"):
        if not storage.intact(folder, "the tiny tokenizer's cache entry"):
            tmp = cache_dir / f".tiny-tokenizer.{os.getpid()}.tmp"
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir()
            (tmp / "vocab.txt").write_text("\n".join(_TINY_VOCAB) + "\n")
            (tmp / "tokenizer_config.json").write_text('{"tokenizer_class": "BertTokenizer", "do_lower_case": true}')
            storage.publish(tmp, folder)
    return AutoTokenizer.from_pretrained(str(folder))


def tiny_config(shape: ShapeSpec, num_labels: int) -> BertConfig:
    return BertConfig(
        vocab_size=len(_TINY_VOCAB),
        hidden_size=shape.hidden_size,
        num_hidden_layers=shape.num_layers,
        num_attention_heads=shape.num_heads,
        intermediate_size=shape.ffn_size,
        max_position_embeddings=shape.max_positions,
        num_labels=num_labels,
    )


def teacher_tokenizer(teacher: TeacherSpec, cache_dir: Path):
    if teacher.shape is not None:
        return tiny_tokenizer(cache_dir)
    return load(AutoTokenizer, teacher.name_or_path)


def pretrained_teacher(teacher: TeacherSpec, num_labels: int, seed: int, *, mlm: bool = False) -> PreTrainedModel:
    """The teacher before task fine-tuning: from a checkpoint, or built from `shape` (the tiny test teacher).

    `mlm`: the encoder for raw text, with its MLM head when it has one; otherwise a sequence classifier (its
    head new unless the checkpoint has one)."""
    auto = (AutoModelForMaskedLM if teacher.has_mlm_head else AutoModel) if mlm else AutoModelForSequenceClassification
    if teacher.shape is not None:
        torch.manual_seed(seed)
        return auto.from_config(tiny_config(teacher.shape, num_labels))
    return load(auto, teacher.name_or_path, **({} if mlm else {"num_labels": num_labels}))


def teacher_config(teacher: TeacherSpec) -> PretrainedConfig:
    """The teacher's architecture config, cheaply (no weights): used to validate before heavy work."""
    if teacher.shape is not None:
        return tiny_config(teacher.shape, 2)
    return load(AutoConfig, teacher.name_or_path)


# ----------------------------------------------------------------------------------------------------------------
# Students and model anatomy


def student_config(teacher_conf: PretrainedConfig, shape: ShapeSpec, num_labels: int,
                   dropout: float | None = None) -> PretrainedConfig:
    """The teacher's config with the student's depth and width: the student is the teacher's model family.

    `dropout` (if given) replaces the family's hidden and attention dropout probabilities."""
    config = teacher_conf.__class__.from_dict(teacher_conf.to_dict())
    config.num_hidden_layers = shape.num_layers
    config.hidden_size = shape.hidden_size
    config.num_attention_heads = shape.num_heads
    config.intermediate_size = shape.ffn_size
    config.num_labels = num_labels
    if dropout is not None:
        config.hidden_dropout_prob = config.attention_probs_dropout_prob = dropout
    return config


def build_student(teacher_conf: PretrainedConfig, shape: ShapeSpec, num_labels: int, seed: int, *,
                  mlm: bool = False, dropout: float | None = None) -> PreTrainedModel:
    """A random student; `mlm`: with an MLM head (saved with save_pretrained, it loads with AutoModel and
    fine-tunes on GLUE), else a sequence classifier."""
    auto = AutoModelForMaskedLM if mlm else AutoModelForSequenceClassification
    torch.manual_seed(seed)
    return auto.from_config(student_config(teacher_conf, shape, 2 if mlm else num_labels, dropout))


def init_from_teacher(student: PreTrainedModel, teacher: PreTrainedModel, init: InitSpec) -> None:
    """Copy teacher block init.layers[i] into student block i, the embeddings (with the MLM head, where both have
    one) when `init.copy_embeddings`, and the task head (pooler, classifier) when `init.copy_head`."""
    student_blocks, teacher_blocks = encoder_layers(student), encoder_layers(teacher)
    for student_index, teacher_layer in enumerate(init.layers):
        student_blocks[student_index].load_state_dict(teacher_blocks[teacher_layer - 1].state_dict())
    copied = (MLM_HEADS if init.copy_embeddings else ()) + (TASK_HEADS if init.copy_head else ())
    if init.copy_embeddings:
        embeddings(student).load_state_dict(embeddings(teacher).state_dict())
    teacher_head = prediction_head(teacher)
    for name, module in prediction_head(student).items():
        if name in copied and name in teacher_head:
            module.load_state_dict(teacher_head[name].state_dict())


def student_for(plan, teacher: PreTrainedModel, *, mlm: bool = False) -> PreTrainedModel:
    """The plan's student, initialised, set up for training on the plan's device (its seed drawn first)."""
    if plan.init.path is not None:  # a distilled student's weights; the heads it lacks start fresh, seeded
        torch.manual_seed(plan.seed)
        config = student_config(plan.teacher_conf, plan.student, 2 if mlm else plan.num_labels,
                                plan.trainer.student_dropout)
        student = load(AutoModelForMaskedLM if mlm else AutoModelForSequenceClassification, plan.init.path,
                       saved_as="the pretrained student (init.path)", config=config)
    else:
        student = build_student(plan.teacher_conf, plan.student, plan.num_labels, plan.seed, mlm=mlm,
                                dropout=plan.trainer.student_dropout)
    if plan.init.layers is not None:
        init_from_teacher(student, teacher, plan.init)
    prepare_for_training(student, plan.trainer.recompute_attention).to(plan.device)
    if plan.trainer.compile:  # measured in benchmarks/RESULTS.md; off by default
        compile_blocks(student, teacher)
    return student


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


def prepare_for_training(model: PreTrainedModel, recompute_attention: bool) -> PreTrainedModel:
    """A model about to be trained: with `recompute_attention` (`trainer.recompute_attention`), its attention
    becomes `_recomputed_sdpa`, with SDPA's form of the padding mask. Not saved with the model."""
    if recompute_attention:
        AttentionInterface.register(RECOMPUTED_SDPA, _recomputed_sdpa)
        AttentionMaskInterface.register(RECOMPUTED_SDPA, sdpa_mask)
        model.set_attn_implementation(RECOMPUTED_SDPA)
    return model


# attention implementations whose mask is SDPA's boolean one (`sdpa_mask`)
SDPA_IMPLEMENTATIONS = ("sdpa", RECOMPUTED_SDPA)


def attention_mask(model: PreTrainedModel, mask: torch.Tensor,
                   padded: bool | None) -> torch.Tensor | None:
    """The attention mask to give `model` for a [B, L] padding `mask` (non-zero = a real token).

    Transformers' mask builder reads a [B, L] mask's values to decide whether it can drop it (a
    host-device synchronisation in every forward). Where the host knows (`padded`, from the
    collator), a batch without padding gets no mask (SDPA may then choose its flash kernel); every
    other batch gets SDPA's own form, built on the device from `mask` and passed as is: [B, 1, 1, L]
    booleans, True where a key is attended, for every query. An attention implementation with
    another form of mask (eager) is given `mask` and builds its own.
    """
    if padded is False:
        return None
    if model.config._attn_implementation not in SDPA_IMPLEMENTATIONS:
        return mask
    return (mask != 0)[:, None, None, :]


def embeddings(model: PreTrainedModel) -> torch.nn.Module:
    return model.base_model.embeddings


MLM_HEADS = ("cls", "lm_head")  # BERT's MLM head, RoBERTa's
TASK_HEADS = ("classifier", "pooler")  # a sequence classifier and the pooler under it


def prediction_head(model: PreTrainedModel) -> dict[str, torch.nn.Module]:
    """The modules above the encoder that the model has: the pooler, a classifier, an MLM head."""
    head = {name: getattr(model, name) for name in (*MLM_HEADS, "classifier")
            if isinstance(getattr(model, name, None), torch.nn.Module)}
    pooler = getattr(model.base_model, "pooler", None)
    if pooler is not None:
        head["pooler"] = pooler
    return head


def mlm_head(model: PreTrainedModel) -> torch.nn.Module:
    """The masked-language-model head (hidden states -> vocabulary logits)."""
    for name in MLM_HEADS:
        if isinstance(getattr(model, name, None), torch.nn.Module):
            return getattr(model, name)
    raise ConfigError(f"{type(model).__name__} has no MLM head: MLM-based objectives need a teacher with one")
