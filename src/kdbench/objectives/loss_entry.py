"""How an objective's term applies a loss: `losses.LOSSES` holds one `LossEntry` per loss, with
the rules of the parameters a term may give it."""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property

from torch import Tensor

from kdbench.planning.rules import Rule, like


@dataclass(frozen=True)
class LossEntry:
    """How an objective's term applies a loss, named in configs as `fn` is named.

    A loss is called on each mapped layer pair's (student, teacher) features and summed over the
    pairs; a `module` loss instead builds a learnable module, called once on the features of all
    mapped layers concatenated.
    """

    fn: Callable[
        ..., Tensor
    ]  # the loss on one layer pair's features; for a `module` loss, its module's factory
    features: tuple[
        str, ...
    ]  # the features it reads (`features.FEATURES` or LOGITS); the first is the default
    fused: Callable[..., Tensor] | None = (
        None  # the same loss on the raw projections, its gradient formed in forward
    )
    projected: bool = False  # a learnable student->teacher width projection precedes it
    # `fn(student_width, teacher_width, train_labels, seed, **params)` builds an nn.Module
    module: bool = False
    classification_only: bool = False  # contrasts examples by their task labels
    # the parameters only its classification form reads (a regression's one output ignores them)
    classification_params: tuple[str, ...] = ()
    # reads masked-language-model logits (task-agnostic setting, a teacher with an MLM head)
    mlm: bool = False
    # {parameter: Rule} where a range matters; another parameter takes values of its default's type
    rules: dict = field(default_factory=dict, hash=False)

    # Read at every step, so plain attributes (a step compiled by torch.compile traces them):
    # called with the batch's labels (the task's labels, or the MLM's original token ids)
    takes_labels: bool = field(init=False)
    # takes `num_heads` (relation heads; a term's default is the teacher's head count)
    takes_num_heads: bool = field(init=False)
    # the parameters a term passes on to `fused` (its keyword-only ones)
    fused_keywords: tuple[str, ...] = field(init=False)
    # takes `padding` (its fused form too) from the stage (`stages.<stage>.padding`), not from a
    # term: a loss that declares `padding` in its `rules` takes it as a term parameter instead
    takes_padding: bool = field(init=False)

    def __post_init__(self):
        parameters = inspect.signature(self.fn).parameters
        object.__setattr__(self, "takes_labels", "labels" in parameters)
        object.__setattr__(self, "takes_num_heads", "num_heads" in parameters)
        fused = inspect.signature(self.fused).parameters.values() if self.fused else ()
        keywords = tuple(p.name for p in fused if p.kind is p.KEYWORD_ONLY)
        object.__setattr__(self, "fused_keywords", keywords)
        padded = "padding" in parameters
        object.__setattr__(self, "takes_padding", padded and "padding" not in self.rules)
        if padded and self.fused is not None and "padding" not in keywords:
            raise TypeError(f"{self.fn.__name__}'s fused form takes no padding")
        if undeclared := sorted(
            (set(self.rules) | set(self.classification_params)) - set(self.param_rules)
        ):
            raise TypeError(f"{self.fn.__name__} has no parameter {', '.join(undeclared)}")

    @cached_property
    def parameters(self) -> list[inspect.Parameter]:
        """What a term's `params` may set: `fn`'s arguments after the two features, less the mask
        and labels a step passes and the padding its stage gives (`takes_padding`); for a `module`
        loss, the keyword arguments of the module it builds."""
        if self.module:
            builds = typing.get_type_hints(self.fn)["return"]
            keywords = inspect.signature(builds).parameters.values()
            return [p for p in keywords if p.kind is p.KEYWORD_ONLY and p.name != "seed"]
        taken = list(inspect.signature(self.fn).parameters.values())[2:]
        given = ("mask", "labels", "padding") if self.takes_padding else ("mask", "labels")
        return [p for p in taken if p.name not in given]

    @cached_property
    def param_rules(self) -> dict[str, Rule | None]:
        """Each parameter's rule: the declared one (`rules`), else one admitting values of its
        default's type (`like`)."""
        return {p.name: self.rules.get(p.name) or like(p.default) for p in self.parameters}
