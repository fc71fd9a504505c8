"""The teacher's stage-1 features of every training example, computed once and read back at every
step.

The frozen teacher is deterministic in eval mode, and stage 1 shows it the same examples every
epoch, seed and objective: its features at the mapped layers are a function of the example alone
(padding is masked in its attention). They are computed in one pass, stored per example without
padding (each raw feature of each layer as one [T, D] table over the T real tokens of the training
set), cached on disk next to the teacher's logits or kept in the run's memory
(`trainer.teacher_features_store`), and gathered into padded batches at each step. An
entry larger than `trainer.teacher_features_gib` is not built: the teacher then runs at every step,
as without the cache.

A step gathers on the training device without a host synchronisation: the table lives there when
it fits (on the CPU that is the same memory; on a GPU within half its free memory), and a batch's
rows are computed there from its padding mask and example numbers. A table too large for the GPU
stays in pinned host memory: there the rows are read on the host (a synchronisation) and the
gathered batch is copied from pinned memory without waiting.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch
from torch import Tensor

from kdbench.data.batches import make_loader
from kdbench.data.columns import column_array
from kdbench.models.anatomy import encoder_layers
from kdbench.objectives.features import FeatureRecorder
from kdbench.objectives.tensors import LOGITS
from kdbench.planning.trainer_specs import kept_on_disk
from kdbench.runtime import storage
from kdbench.runtime.precision import computing
from kdbench.teacher.cache import cached_tensors, derived_key
from kdbench.teacher.frozen import FineTuned
from kdbench.training.signals import check_stop, phase, stop_between
from kdbench.training.steps import LogitsFn, read_records, to_device

logger = logging.getLogger("kdbench")


def token_rows(offsets: Tensor, examples: Tensor, lengths: Tensor) -> Tensor:
    """The table rows of the real tokens of `examples` [B] with `lengths` [B], in batch order:
    example i's tokens are rows offsets[i] .. offsets[i] + lengths[i] - 1."""
    starts = torch.repeat_interleave(
        offsets[examples] - torch.cumsum(lengths, 0) + lengths, lengths
    )
    return starts + torch.arange(int(lengths.sum()))


def real_token_rows(offsets: Tensor, batch: dict) -> tuple[Tensor, Tensor, Tensor]:
    """On the CPU: the batch's real-token mask [B, L], its examples [B] and their tokens' table rows
    [n]."""
    mask = batch["attention_mask"].cpu() != 0
    examples = batch["example"].cpu()
    return mask, examples, token_rows(offsets, examples, mask.sum(1))


def _moved(gathered: Tensor, device: torch.device) -> Tensor:
    """Rows gathered from the table, on `device`: as they are when the table is there, else copied
    from pinned memory without waiting."""
    if gathered.device == device:
        return gathered
    return gathered.pin_memory().to(device, non_blocking=True)


def batch_rows(offsets: Tensor, mask: Tensor, examples: Tensor) -> Tensor:
    """The table rows of a batch's [B, L] positions, on its arguments' device, without reading them.

    A real token's row is its example's offset plus the real tokens before it; a padded position
    repeats a row of its example (or the next example's first when it has none), which the caller
    masks.
    """
    return offsets.index_select(0, examples)[:, None] + (mask.long().cumsum(1) - 1).clamp(min=0)


@dataclass
class FeatureTable:
    """The teacher's raw features per layer (`features[layer][name]`: [T, D], the real tokens of
    every example in example order), `offsets` [N + 1] (example i's rows start at offsets[i]) and,
    when the objective reads them, the logits [N, C]."""

    offsets: Tensor
    features: dict[int, dict[str, Tensor]]
    logits: Tensor | None

    def records(self, batch: dict) -> dict:
        """The batch's teacher records on the batch's device: [B, L, D] per raw feature, a teacher
        forward's values at the real tokens and zero at padding (which every loss masks); the logits
        [B, C]."""
        mask = batch["attention_mask"] != 0
        device, at = mask.device, self.offsets.device
        rows = batch_rows(self.offsets, mask.to(at), batch["example"].to(at)).flatten()
        records: dict = {}
        for layer, raw in self.features.items():
            records[layer] = {}
            for name, table in raw.items():
                padded = _moved(table.index_select(0, rows.clamp(max=len(table) - 1)), device)
                records[layer][name] = padded.view(*mask.shape, -1).masked_fill(~mask[..., None], 0)
        if self.logits is not None:
            records[LOGITS] = _moved(self.logits.index_select(0, batch["example"].to(at)), device)
        return records

    def placed(self, device: torch.device, size: int) -> FeatureTable:
        """This table where a step gathers from it: on `device` when its `size` bytes fit there
        (on a GPU: within half its free memory), otherwise in pinned host memory."""
        on_gpu = device.type == "cuda" and size <= torch.cuda.mem_get_info(device)[0] // 2
        fits = device.type == "cpu" or on_gpu
        place = (lambda t: t.to(device)) if fits else (lambda t: t.pin_memory())  # noqa: E731
        return FeatureTable.of({key: place(tensor) for key, tensor in self.state().items()})

    def state(self) -> dict[str, Tensor]:
        state = {"offsets": self.offsets} | (
            {"logits": self.logits} if self.logits is not None else {}
        )
        return state | {
            f"{layer}.{name}": t for layer, raw in self.features.items() for name, t in raw.items()
        }

    @classmethod
    def of(cls, state: dict[str, Tensor]) -> FeatureTable:
        features: dict[int, dict[str, Tensor]] = {}
        for key, tensor in state.items():
            if key not in ("offsets", "logits"):
                layer, name = key.split(".")
                features.setdefault(int(layer), {})[name] = tensor
        return cls(state["offsets"], features, state.get("logits"))


def table_bytes(train_set, model_config, needs: Mapping[int, set[str]], precision: str) -> int:
    """The size of a table: every raw feature is one hidden-size vector per real token."""
    tokens = int(column_array(train_set, "length").sum())
    vectors = sum(len(names) for names in needs.values())
    return tokens * vectors * model_config.hidden_size * (2 if precision == "bf16" else 4)


def compute_table(
    teacher, train_set, tokenizer, plan, needs, stop_after: int | None, logits: LogitsFn | None
) -> FeatureTable:
    """One inference pass of the teacher over the training set, in batches of similar length; a stop
    signal ends it between blocks."""
    lengths = torch.from_numpy(column_array(train_set, "length"))
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), torch.cumsum(lengths, 0)])
    features: dict[int, dict[str, Tensor]] = {}
    logits_table = None
    loader = make_loader(train_set, tokenizer, plan.trainer.eval_batch_size, shuffle=False)
    with (
        FeatureRecorder(teacher, needs, stop_after) as recorder,
        torch.inference_mode(),
        phase("teacher_features"),
        stop_between(encoder_layers(teacher)),
    ):
        for batch in loader:
            check_stop()
            batch = to_device(batch, plan.device)
            with computing(plan.device, plan.precision, teacher):
                records = read_records(recorder, batch, logits)
            mask, examples, rows = real_token_rows(offsets, batch)
            if LOGITS in records:
                logits_table = _written(
                    logits_table, len(lengths), examples, records.pop(LOGITS).cpu()
                )
            for layer, raw in records.items():
                tables = features.setdefault(layer, {})
                for name, value in raw.items():
                    tables[name] = _written(
                        tables.get(name), int(offsets[-1]), rows, value.cpu()[mask]
                    )
    return FeatureTable(offsets, features, logits_table)


def _written(table: Tensor | None, size: int, index: Tensor, values: Tensor) -> Tensor:
    """`values` [n, D] written at rows `index` of `table`, allocated as [size, D] of their dtype on
    first use."""
    if table is None:
        table = torch.empty(size, values.shape[-1], dtype=values.dtype)
    table[index] = values
    return table


# (needs, stop_after, logits) -> the table, or None when it exceeds the budget (see
# teacher_feature_table)
FeatureTableFn = Callable[
    [Mapping[int, set[str]], int | None, LogitsFn | None], FeatureTable | None
]


def teacher_feature_table(
    teacher: FineTuned,
    train_set,
    tokenizer,
    plan,
    augmented: str | None,
    needs: Mapping[int, set[str]],
    stop_after: int | None,
    logits: LogitsFn | None,
) -> FeatureTable | None:
    """The teacher's features at `needs` (layer -> raw feature names) for every training example,
    from the disk cache or computed now; None when the table would exceed
    `trainer.teacher_features_gib`."""
    size = table_bytes(train_set, teacher.model.config, needs, plan.precision)
    budget = plan.trainer.teacher_features_gib * 2**30
    if size > budget:
        logger.info(
            "the teacher's stage-1 features would take %s, more than "
            "trainer.teacher_features_gib=%s: the teacher runs at every step",
            storage.human(size),
            plan.trainer.teacher_features_gib,
        )
        return None

    def build() -> dict[str, Tensor]:
        return compute_table(
            teacher.model, train_set, tokenizer, plan, needs, stop_after, logits
        ).state()

    if not kept_on_disk(plan.trainer.teacher_features_store, plan.device.type):
        state = build()
    else:
        key = derived_key(teacher.identity, train_set, tokenizer, plan, augmented) | {
            "features": {str(layer): sorted(names) for layer, names in sorted(needs.items())},
            "stop_after": stop_after,
            "logits": logits is not None,
        }
        folder = plan.cache_dir / "teacher_features"
        what = "the teacher-features cache entry"
        state = cached_tensors(folder, plan.task.name, key, build, size, what)
    return FeatureTable.of(state).placed(plan.device, size)
