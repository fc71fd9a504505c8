"""A bound on a distillation step's device memory, and the micro-batch it allows on a GPU
(`trainer.device_batch_size=auto`).

The bound counts float32 values (4 bytes each, though a bf16 run keeps many in 2): the student's
weights, gradients and AdamW moments and the frozen teacher's weights, which do not grow with the
micro-batch, and per sequence what the student's forward keeps for the backward (every trained
block's inputs, activations, attention probabilities and dropout masks), the losses' score maps and
MLM logits, the teacher's recorded features and one of its blocks in flight.
`tests/smoke/test_memory.py` holds the student's side above what autograd keeps in each objective's
real step, and within 2.5 times that.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kdbench.errors import ConfigError
from kdbench.objectives.tensors import LOGITS

FP32 = 4
ADAMW_STATE = 4  # weight, gradient and the two moments, float32
MASKED_SHARE = 0.2  # MLM rows per sequence: 15% masked, with room for a batch's variation
MAP_FEATURES = ("attention_scores", "values", "query", "key", "value")  # [B, H, L, L] per side
MAP_COPIES = 2  # per pair: the gradient a fused loss keeps and the maps in flight
LOGIT_COPIES = 2  # per term: the gradient a chunked loss keeps, the logits in flight
MEMORY_SHARE = 0.5  # of the device's memory past the static part: the allocator, CUDA's context and
# workspaces, the bound's own error
CPU_DEVICE_BATCH = 64  # trainer.device_batch_size=auto off a GPU: memory is not the limit there


@dataclass(frozen=True)
class StepMemory:
    """Bytes a step holds on its device: `static` whatever the micro-batch; per sequence, the
    student's side (what its backward needs, the losses' maps and logits) and the teacher's."""

    static: int
    student: int
    teacher: int

    @property
    def sequence(self) -> int:
        return self.student + self.teacher

    def total(self, micro_batch: int) -> int:
        return self.static + micro_batch * self.sequence


def encoder_parameters(conf) -> int:
    """A BERT-style encoder's weights with an MLM head (tied decoder), from its config."""
    h, f = conf.hidden_size, conf.intermediate_size
    embeddings = (conf.vocab_size + conf.max_position_embeddings + conf.type_vocab_size + 2) * h
    block = 4 * h * h + 2 * h * f + 9 * h + f
    head = h * h + 3 * h + conf.vocab_size
    return embeddings + conf.num_hidden_layers * block + head


def block_values(conf, length: int) -> int:
    """Per token, the values one trained block keeps for its backward: its six linear layers'
    inputs, queries, keys, values and context, the attention scores, probabilities and dropout mask,
    the feed-forward's two activations, two layer norms' inputs and two dropout masks."""
    h, f, heads = conf.hidden_size, conf.intermediate_size, conf.num_attention_heads
    return 14 * h + 2 * f + 3 * heads * length


def student_values(objective, conf, length: int) -> int:
    """Per token, the values the student's forward keeps: its embeddings' and every block's up to
    the last one a loss reads; of that one only its linear inputs when the losses read no more than
    its projections."""
    needs = objective.needs("student")
    last = conf.num_hidden_layers if objective.uses_logits else max(needs)
    full = last if objective.uses_logits or "hidden" in needs[last] else last - 1
    partial = (last - full) * 3 * conf.hidden_size
    return 3 * conf.hidden_size + full * block_values(conf, length) + partial


def teacher_values(conf, length: int, layers_read: int) -> int:
    """Per token, the teacher's features recorded for the losses and one block in flight."""
    h, f, heads = conf.hidden_size, conf.intermediate_size, conf.num_attention_heads
    return 4 * h * layers_read + 4 * h + f + 2 * heads * length


def loss_values(objective, student_conf, teacher_conf, length: int) -> float:
    """Per sequence, the losses' score maps and logits."""
    heads = max(student_conf.num_attention_heads, teacher_conf.num_attention_heads)
    values = 0.0
    for term in objective.terms:
        if term.feature == LOGITS:
            rows = length if term.positions == "attended" else MASKED_SHARE * length
            values += LOGIT_COPIES * rows * (student_conf.vocab_size + student_conf.hidden_size)
        elif term.feature in MAP_FEATURES:
            relation_heads = term.params.get("num_heads", heads)
            values += MAP_COPIES * len(term.pairs) * relation_heads * length * length
        else:
            widths = student_conf.hidden_size + teacher_conf.hidden_size
            values += 2 * len(term.pairs) * length * widths
    return values


def step_memory(objective, student_conf, teacher_conf, length: int, precision: str):
    """The `StepMemory` bound of a task-agnostic step with `objective` (an `Objective`) on
    sequences of `length` tokens at `precision` (a bf16 run keeps the teacher's weights in bf16)."""
    teacher_bytes = 2 if precision == "bf16" else FP32
    student = student_values(objective, student_conf, length) * length
    student += loss_values(objective, student_conf, teacher_conf, length)
    teacher = teacher_values(teacher_conf, length, len(objective.needs("teacher"))) * length
    trainable = encoder_parameters(student_conf) + sum(p.numel() for p in objective.parameters())
    static = ADAMW_STATE * FP32 * trainable + teacher_bytes * encoder_parameters(teacher_conf)
    return StepMemory(static, int(FP32 * student), FP32 * teacher)


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
            f"trainer.device_batch_size=auto: a step on one sequence needs up to "
            f"{memory.total(1) / gib:.1f} GiB of the device's {device_bytes / gib:.1f} GiB: use a "
            "smaller student, teacher or corpus.seq_len, or a GPU with more memory"
        )
    return micro


def device_batch(requested, per_process: int, device: torch.device, memory) -> int:
    """`trainer.device_batch_size`: a number as given; auto as `fitting_micro_batch` on a CUDA
    GPU's memory (`memory`: a callable giving the `StepMemory`), elsewhere the largest divisor of
    `per_process` up to `CPU_DEVICE_BATCH`."""
    if requested != "auto":
        return requested
    if device.type != "cuda":
        return largest_divisor(per_process, CPU_DEVICE_BATCH)
    total = torch.cuda.get_device_properties(device).total_memory
    return fitting_micro_batch(per_process, memory(), total)
