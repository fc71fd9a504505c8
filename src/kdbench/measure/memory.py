"""A bound on a distillation step's device memory, and the micro-batch it allows on a GPU
(`stages.distillation.device_batch_size=auto`).

The bound counts bytes at the width each value is kept in: under bf16 autocast the matmuls' inputs
and outputs in 2 bytes, what autocast keeps in float32 (layer norms' inputs, the residual stream,
the losses' inputs cast to float32) in 4. Static: the student's weights, gradients and AdamW
moments, autocast's bf16 copies of its matmul weights, the frozen teacher's weights (bf16 in a bf16
run). Per sequence: what the student's forward keeps for the backward (every trained block's
inputs, projections and activations, its dropout masks and its fused attention's logsumexp: the
flash and memory-efficient SDPA kernels a GPU runs keep no [B, H, L, L] map), what the losses keep
(their gradients, logits and log-probabilities), the teacher's recorded features, and the most any
moment of the step holds in flight beyond those (the score-map losses' chunk of maps, a block's
gradients in backward, the teacher's block in forward, a logits gradient).
`tests/smoke/test_memory.py` holds the kept part above what autograd keeps in each objective's real
step, fp32 and bf16, and within 1.5 times that.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from kdbench.errors import ConfigError
from kdbench.objectives import vocabulary
from kdbench.objectives.fused import CHUNK_BYTES
from kdbench.objectives.tensors import LOGITS

FP32 = 4
MASK = 1  # a dropout mask's byte per element
ADAMW_STATE = 4  # weight, gradient and the two moments, float32
LAYER_NORM_STATS = 2 * FP32  # a layer norm's mean and reciprocal deviation per token
MASKED_SHARE = 0.16  # MLM rows per sequence: 15% masked, with room for a micro-batch's variation
# (1.2 points at three standard deviations over 64 x 128 tokens)
MAP_FEATURES = ("attention_scores", "values", "query", "key", "value")  # [B, H, L, L] per side
MAPS_IN_FLIGHT = 4  # float32 maps of one chunk of heads a score-map loss holds at once
LOGIT_CHUNKS = 4  # float32 chunks of rows a logits term holds at once (`vocabulary.CHUNK_BYTES`)
HEAD_VALUES = 4  # an MLM head's [rows, hidden] values: dense, GELU, layer norm and decoder inputs
MEMORY_SHARE = 0.5  # of the device's memory past the static part: the allocator, CUDA's context and
# workspaces, the bound's own error
# stages.distillation.device_batch_size=auto off a GPU: memory is not the limit there
CPU_DEVICE_BATCH = 64


def activation_bytes(precision: str) -> int:
    """Bytes of a value autocast computes in the run's precision (a matmul's input or output)."""
    return 2 if precision == "bf16" else FP32


@dataclass(frozen=True)
class StepMemory:
    """Bytes a step holds on its device: `static` whatever the micro-batch; per sequence, what the
    student's side keeps for its backward (`student`), the teacher's recorded features (`teacher`)
    and the most held at once beyond those (`in_flight`)."""

    static: int
    student: int
    teacher: int
    in_flight: int = 0

    @property
    def sequence(self) -> int:
        return self.student + self.teacher + self.in_flight

    def total(self, micro_batch: int) -> int:
        return self.static + micro_batch * self.sequence


def encoder_parameters(conf) -> int:
    """A BERT-style encoder's weights with an MLM head (tied decoder), from its config."""
    h, f = conf.hidden_size, conf.intermediate_size
    embeddings = (conf.vocab_size + conf.max_position_embeddings + conf.type_vocab_size + 2) * h
    block = 4 * h * h + 2 * h * f + 9 * h + f
    head = h * h + 3 * h + conf.vocab_size
    return embeddings + conf.num_hidden_layers * block + head


def cast_weights(objective, conf, precision: str) -> int:
    """Bytes of autocast's bf16 copies of the student's matmul weights (and the objective's), which
    its backward keeps; none in fp32."""
    if precision != "bf16":
        return 0
    h, f = conf.hidden_size, conf.intermediate_size
    weights = conf.num_hidden_layers * (4 * h * h + 2 * h * f)
    weights += sum(p.numel() for p in objective.parameters())
    if objective.uses_logits:
        weights += h * h + conf.vocab_size * h
    return activation_bytes(precision) * weights


def block_bytes(conf, precision: str) -> int:
    """Per token, the bytes one trained block keeps for its backward: its linear layers' inputs,
    queries, keys and values, the feed-forward's GELU input, at the run's width; two layer norms'
    float32 inputs and statistics, the fused attention's float32 logsumexp (one per head) and two
    dropout masks."""
    h, f, heads = conf.hidden_size, conf.intermediate_size, conf.num_attention_heads
    matmul_values = 6 * h + 2 * f  # the projections share one copy of their input (under bf16 too)
    float32_values = 2 * h + heads
    return (
        activation_bytes(precision) * matmul_values
        + FP32 * float32_values
        + 2 * LAYER_NORM_STATS
        + 2 * MASK * h
    )


def student_bytes(objective, conf, precision: str) -> int:
    """Per token, the bytes the student's forward keeps: its embeddings' (token ids, a layer norm's
    input and a dropout mask) and every block's up to the last one a loss reads; of that one only
    its projections' inputs when the losses read no more than its projections."""
    needs = objective.needs("student")
    last = conf.num_hidden_layers if objective.uses_logits else max(needs)
    full = last if objective.uses_logits or "hidden" in needs[last] else last - 1
    h = conf.hidden_size
    partial = (last - full) * activation_bytes(precision) * h
    embeddings = 2 * 8 + (FP32 + MASK) * h + LAYER_NORM_STATS
    return embeddings + full * block_bytes(conf, precision) + partial


def teacher_bytes(conf, layers_read: int, precision: str) -> int:
    """Per token, the teacher's features recorded for the losses (at most a layer's queries, keys,
    values and output per layer read), in its weights' precision."""
    return activation_bytes(precision) * 4 * conf.hidden_size * layers_read


def teacher_block_bytes(conf, precision: str) -> int:
    """Per token, the most one teacher block holds in flight in its forward (no gradient): its
    input, queries, keys, values, context and output, the feed-forward's two activations and the
    attention's logsumexp."""
    h, f = conf.hidden_size, conf.intermediate_size
    return activation_bytes(precision) * (6 * h + 2 * f) + FP32 * conf.num_attention_heads


def logit_rows(term, length: int) -> float:
    """The rows of a logits term per sequence: every attended token, or the masked ones."""
    return length if term.positions == "attended" else MASKED_SHARE * length


def loss_bytes(objective, student_conf, teacher_conf, length: int, precision: str) -> float:
    """Per sequence, what the losses keep for the backward: a logits term's gradient (formed in the
    forward, in the logits' dtype) and the MLM head's inputs; a score-map term's gradients of the
    student's projections (the fused losses keep no map); a hidden-state term's float32 states of
    both sides."""
    h = student_conf.hidden_size
    logit_terms = [term for term in objective.terms if term.feature == LOGITS]
    kept = (
        max((logit_rows(term, length) for term in logit_terms), default=0) * HEAD_VALUES * FP32 * h
    )
    for term in objective.terms:
        if term.feature == LOGITS:
            kept += logit_rows(term, length) * activation_bytes(precision) * student_conf.vocab_size
        elif term.feature in MAP_FEATURES:
            kept += len(term.pairs) * length * 2 * h * activation_bytes(precision)
        else:
            students, teachers = (len(layers) for layers in term.sides())
            widths = students * h + teachers * teacher_conf.hidden_size
            kept += length * 2 * widths * FP32
    return kept


def losses_in_flight(objective, student_conf, length: int, precision: str) -> float:
    """Per sequence, the most a loss holds at once beyond what it keeps: a score-map loss's maps of
    one head (more heads at once fit `CHUNK_BYTES`, counted in the static part) and its float32
    gradient buffers, or a logits term's two sides' logits (its float32 chunks are static)."""
    largest = 0.0
    for term in objective.terms:
        if term.feature == LOGITS:
            logits = logit_rows(term, length) * student_conf.vocab_size
            largest = max(largest, 2 * activation_bytes(precision) * logits)
        elif term.feature in MAP_FEATURES:
            maps = MAPS_IN_FLIGHT * FP32 * length * length
            largest = max(largest, maps + 2 * FP32 * student_conf.hidden_size * length)
    return largest


def step_memory(objective, student_conf, teacher_conf, length: int, precision: str):
    """The `StepMemory` bound of a task-agnostic step with `objective` (an `Objective`) on
    sequences of `length` tokens at `precision` (a bf16 run keeps the teacher's weights in bf16)."""
    student = student_bytes(objective, student_conf, precision) * length
    student += loss_bytes(objective, student_conf, teacher_conf, length, precision)
    teacher = teacher_bytes(teacher_conf, len(objective.needs("teacher")), precision) * length
    in_flight = max(
        block_bytes(student_conf, precision) * length,
        teacher_block_bytes(teacher_conf, precision) * length,
        losses_in_flight(objective, student_conf, length, precision),
    )
    trainable = encoder_parameters(student_conf) + sum(p.numel() for p in objective.parameters())
    static = ADAMW_STATE * FP32 * trainable + cast_weights(objective, student_conf, precision)
    static += activation_bytes(precision) * encoder_parameters(teacher_conf)
    if any(term.feature in MAP_FEATURES for term in objective.terms):
        static += MAPS_IN_FLIGHT * CHUNK_BYTES
    if objective.uses_logits:
        static += LOGIT_CHUNKS * vocabulary.CHUNK_BYTES
    return StepMemory(static, math.ceil(student), teacher, math.ceil(in_flight))


def largest_divisor(count: int, at_most: float) -> int:
    """The largest divisor of `count` not above `at_most` (0 when `at_most` < 1)."""
    return max((d for d in range(1, count + 1) if count % d == 0 and d <= at_most), default=0)


def fitting_micro_batch(per_process: int, memory: StepMemory, device_bytes: int) -> int:
    """The largest divisor of `per_process` whose micro-batches fit in `MEMORY_SHARE` of what the
    static part leaves of `device_bytes`."""
    room = MEMORY_SHARE * (device_bytes - memory.static)
    micro = largest_divisor(per_process, room / memory.sequence)
    if micro == 0:
        gib = 2**30
        raise ConfigError(
            f"stages.distillation.device_batch_size=auto: a step on one sequence needs up to "
            f"{memory.total(1) / gib:.1f} GiB of the device's {device_bytes / gib:.1f} GiB: use a "
            "smaller student, teacher or corpus.seq_len, or a GPU with more memory"
        )
    return micro


def device_batch(requested, per_process: int, device: torch.device, memory) -> int:
    """`stages.distillation.device_batch_size`: a number as given; auto as `fitting_micro_batch` on
    a CUDA GPU's memory (`memory`: a callable giving the `StepMemory`), elsewhere the largest
    divisor of `per_process` up to `CPU_DEVICE_BATCH`."""
    if requested != "auto":
        return requested
    if device.type != "cuda":
        return largest_divisor(per_process, CPU_DEVICE_BATCH)
    total = torch.cuda.get_device_properties(device).total_memory
    return fitting_micro_batch(per_process, memory(), total)
