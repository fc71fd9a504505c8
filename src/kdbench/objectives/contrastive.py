"""The `crd` loss (objective `hid_cls_contrast`): contrastive distillation of [CLS] representations
with memory banks.

This is the contrastive term of "How to Distill your BERT" (Wang et al. 2023), which follows CoDIR
(Sun et al. 2020a, "Contrastive Distillation on Intermediate Representations"), itself CRD-style
(Tian et al. 2020): learnable heads map both sides to a small unit sphere, every training example
owns one memory-bank slot per side, negatives are examples of *other* classes, and an InfoNCE loss
is taken in both directions.

Shapes (B = batch, N = training examples, F = ``feat_dim``, K = ``num_negatives``):

* ``student_repr`` ``[B, student_width]``: the student's [CLS] hidden states at the layers the term
  reads, concatenated by the caller in layer order (the mapped layers'; with the term's
  ``layers: every``, the embeddings' and every layer's, as the study's released driver does).
* ``teacher_repr`` ``[B, teacher_width]``: the same for the (frozen) teacher; always detached here
  and may be an inference-mode tensor.
* ``idx`` ``[B]`` (long): the examples' ids, rows of the memory banks; ``labels`` ``[B]`` their
  classes.
* memory banks ``memory_student`` / ``memory_teacher`` ``[N, F]`` (buffers, saved in
  ``state_dict``).

The loss, with ``z_s = normalize(W_s student_repr)``, ``z_t = normalize(W_t teacher_repr)``,
negative ids ``n_ij`` (j = 1..K) drawn uniformly, with replacement, among the training examples
whose label differs from example i's (with ``replacement=False``, K distinct ones, a uniformly
random K-subset, wherever every class has more than K other-class examples: the study's released
sampler), and temperature tau::

    L = mean_i [ -log softmax( [z_s_i . z_t_i,  z_s_i . bank_t[n_i1], ..., z_s_i . bank_t[n_iK]] /
    tau )_0
                 -log softmax( [z_t_i . z_s_i,  z_t_i . bank_s[n_i1], ..., z_t_i . bank_s[n_iK]] /
                 tau )_0 ]

The positive is the *current* embedding of the same example on the other side; negatives are read
from the other side's memory bank. Everything is computed in float32. After a training-mode forward
the banks are updated at ``idx``: ``bank[idx] = normalize(m * bank[idx] + (1 - m) * z.detach())``
with momentum m.

``form="nce"`` is CRD as the study's code releases it (Tian et al.'s binary NCE,
``crd/criterion.py`` and ``crd/memory.py``): banks start uniform in ``[-1/sqrt(F/3), 1/sqrt(F/3)]``;
the positive is the bank row of the example itself; per direction, over the rows
``c_i = [idx_i, n_i1..n_iK]`` of the other side's bank,
``p_ij = exp(z_i . bank[c_ij] / tau) / Z`` with the first batch's ``Z = mean(exp(...)) * N`` kept
from then on; with ``q = K / N`` and ``eps = 1e-7``::

    L_dir = -(1/B) sum_i [ log(p_i0 / (p_i0 + q + eps)) + sum_j log(q / (p_ij + q + eps)) ]
    L = (L_student_anchor + L_teacher_anchor) / 2
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from kdbench.errors import ConfigError, KdbenchError
from kdbench.objectives import negatives

__all__ = ["ContrastiveDistillation", "ContrastiveSetupError", "crd"]


class ContrastiveSetupError(ConfigError, ValueError):
    """The contrastive loss cannot be built for this training set (a ValueError and a one-line CLI
    error)."""


def _unit(x: Tensor) -> Tensor:
    """L2-normalise the last dimension."""
    return F.normalize(x, dim=-1)


def _info_nce(anchor: Tensor, positive: Tensor, negatives: Tensor, temperature: float) -> Tensor:
    """Mean over the batch of -log softmax(...)[positive]; anchor/positive [B, F], negatives [B, K,
    F]."""
    pos = (anchor * positive).sum(-1, keepdim=True)  # [B, 1]
    neg = torch.einsum("bf,bkf->bk", anchor, negatives)  # [B, K]
    logits = torch.cat([pos, neg], dim=1) / temperature
    return -torch.log_softmax(logits, dim=1)[:, 0].mean()


def _check_params(
    feat_dim: int, num_negatives: int, temperature: float, momentum: float, form: str
) -> None:
    if feat_dim < 1 or num_negatives < 1:
        raise ContrastiveSetupError(
            f"crd: feat_dim ({feat_dim}) and num_negatives ({num_negatives}) must be >= 1"
        )
    if form not in ("infonce", "nce"):
        raise ContrastiveSetupError(
            f"crd: form must be infonce or nce (CRD as released), got {form!r}"
        )
    if temperature <= 0 or not 0.0 <= momentum <= 1.0:
        raise ContrastiveSetupError(
            f"crd: temperature must be > 0 (got {temperature}) and momentum in [0, 1] (got "
            f"{momentum})"
        )


def _class_layout(labels: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Validate train labels and group example ids by class.

    Returns ``classes`` [C] (sorted label values), ``order`` [N] (example ids sorted by class,
    stable), ``start`` [C] and ``count`` [C] (class c occupies ``order[start[c] : start[c] +
    count[c]]``).
    """
    if labels.is_floating_point() or labels.is_complex():
        raise ContrastiveSetupError(
            "crd needs a classification task; STS-B is regression "
            f"(got {labels.dtype} labels); drop the contrastive loss for regression tasks"
        )
    if labels.dim() != 1 or labels.numel() == 0:
        raise ContrastiveSetupError(
            f"crd needs a non-empty 1-D vector of training labels, got shape {tuple(labels.shape)}"
        )
    labels = labels.long()
    classes, class_of, count = torch.unique(
        labels, sorted=True, return_inverse=True, return_counts=True
    )
    if len(classes) < 2:
        raise ContrastiveSetupError(
            f"crd draws negatives from other classes, but every training example has label "
            f"{classes[0].item()}; it needs at least two classes"
        )
    order = torch.argsort(class_of, stable=True)
    start = torch.cumsum(count, 0) - count
    return classes, order, start, count


class ContrastiveDistillation(nn.Module):
    """Contrastive [CLS] distillation (CoDIR / CRD style) with per-example memory banks; see the
    module doc.

    Args:
        student_width: width of ``student_repr`` (hidden size x number of layers read).
        teacher_width: width of ``teacher_repr``. labels: ``[N]`` integer labels of the whole
        training set, indexed by example id. feat_dim: F, the dimension of the contrastive
        embedding. num_negatives: K, negatives per example (drawn from other classes).
        temperature: tau of the InfoNCE logits. momentum: memory-bank momentum m. replacement:
        false draws each example's K negatives distinct, as the study's released sampler does
        wherever K is below every class's pool of other-class examples (else it draws with
        replacement). seed: seeds the bank initialisation and the negative sampler (the sampler's
        state advances each call).

    Both heads (``student_head`` and ``teacher_head``) are learnable and belong to the student-side
    optimizer; only the teacher *model* is frozen. ``forward`` returns a float32 scalar.
    """

    def __init__(
        self,
        student_width: int,
        teacher_width: int,
        labels: Tensor,
        *,
        feat_dim: int = 128,
        num_negatives: int = 100,
        temperature: float = 0.07,
        momentum: float = 0.5,
        form: str = "infonce",
        replacement: bool = True,
        seed: int = 0,
    ):
        super().__init__()
        _check_params(feat_dim, num_negatives, temperature, momentum, form)
        classes, order, start, count = _class_layout(torch.as_tensor(labels).detach().cpu())
        self.num_negatives = num_negatives
        # the released rule: distinct unless K reaches the smallest pool of other-class examples
        self.distinct = not replacement and num_negatives < int((len(order) - count).min())
        self.temperature = temperature
        self.momentum = momentum
        self.form = form
        self.student_head = nn.Linear(student_width, feat_dim)
        self.teacher_head = nn.Linear(teacher_width, feat_dim)

        init = torch.Generator().manual_seed(seed)
        num_examples = len(order)
        for name in ("memory_student", "memory_teacher"):
            self.register_buffer(name, _initial_bank(num_examples, feat_dim, form, init))
        if form == "nce":  # Z of the student- and the teacher-anchored scores; < 0: not yet set
            self.register_buffer("normalisers", torch.full((2,), -1.0))
        # Derived from `labels`: rebuilt at construction, so not saved.
        self.register_buffer("classes", classes, persistent=False)
        self.register_buffer("class_order", order, persistent=False)
        self.register_buffer("class_start", start, persistent=False)
        self.register_buffer("class_count", count, persistent=False)
        self.sampler = torch.Generator().manual_seed(seed)  # on the CPU wherever the module is
        self._register()

    def _register(self) -> None:
        self._key = negatives.register(self)

    def __setstate__(self, state: dict) -> None:
        """A copy (deepcopy, pickle) draws from its own sampler, under its own key."""
        super().__setstate__(state)
        self._register()

    def get_extra_state(self) -> dict:
        """The sampler's RNG state travels with the state dict: a resumed run draws the same
        negatives, on whichever device it resumes."""
        return {"cpu": self.sampler.get_state()}

    def set_extra_state(self, state: dict) -> None:
        """Restores the sampler. A state that is not a CPU generator's (a checkpoint of a kdbench
        that drew negatives on the module's device) is refused: it cannot continue these draws."""
        saved = state.get("cpu") if isinstance(state, dict) else None
        try:
            self.sampler.set_state(saved)
        except (RuntimeError, TypeError):
            found = ", ".join(map(str, state)) if isinstance(state, dict) else type(state).__name__
            raise KdbenchError(
                f"crd: the checkpoint's negative sampler state (saved as {found}) is not a CPU "
                "generator's, and kdbench now draws negatives on the CPU on every device: resume "
                "with the kdbench that saved it, or start afresh in a new run directory"
            ) from None

    @torch.no_grad()
    def sample_negatives(self, labels: Tensor) -> Tensor:
        """``[B, K]`` example ids among the training examples whose label != ``labels[b]``, each
        uniform (with replacement), or distinct within a row (`distinct`).

        Runs on the banks' device: the other-class examples of class c are ``class_order`` minus the
        contiguous block of class c, so a position in ``[0, N - count[c])`` is shifted past that
        block.
        """
        device = self.class_order.device
        cls = torch.searchsorted(self.classes, labels.to(device=device, dtype=torch.long))
        start, count = self.class_start[cls], self.class_count[cls]  # [B]
        available = len(self.class_order) - count
        pos = negatives.positions(self._key, available, self.num_negatives, self.distinct)
        pos = pos + (pos >= start[:, None]).long() * count[:, None]
        return self.class_order[pos]

    @torch.no_grad()
    def update_memory(self, idx: Tensor, z_student: Tensor, z_teacher: Tensor) -> None:
        """``bank[idx] = normalize(m * bank[idx] + (1 - m) * z)`` for both banks; other rows are
        untouched."""
        idx = idx.to(self.memory_student.device)
        for bank, z in ((self.memory_student, z_student), (self.memory_teacher, z_teacher)):
            mixed = self.momentum * bank[idx].float() + (1.0 - self.momentum) * z.detach().float()
            bank.index_copy_(0, idx, _unit(mixed).to(bank.dtype))

    def _binary_nce(self, z_s: Tensor, z_t: Tensor, contrast: Tensor) -> Tensor:
        """CRD as released: each anchor's scores against the other side's bank rows `contrast`
        [B, 1 + K] (the example itself first), divided by the first batch's constant Z; binary NCE,
        the two directions averaged."""
        num_examples = len(self.memory_student)
        losses = []
        sides = ((z_s, self.memory_teacher), (z_t, self.memory_student))
        for side, (anchor, bank) in enumerate(sides):
            products = torch.einsum("bkf,bf->bk", bank[contrast].float(), anchor)
            scores = torch.exp(products / self.temperature)
            first = scores.detach().mean() * num_examples  # Z, kept from the first batch on
            normaliser = torch.where(self.normalisers[side] < 0, first, self.normalisers[side])
            self.normalisers[side] = normaliser
            losses.append(_nce_loss(scores / normaliser, num_examples))
        return (losses[0] + losses[1]) / 2

    def _embed(self, head: nn.Linear, x: Tensor) -> Tensor:
        return _unit(
            F.linear(
                x.float(), head.weight.float(), None if head.bias is None else head.bias.float()
            )
        )

    def forward(
        self, student_repr: Tensor, teacher_repr: Tensor, idx: Tensor, labels: Tensor
    ) -> Tensor:
        """Student->teacher-bank plus teacher->student-bank InfoNCE, float32 scalar; updates the
        banks in training mode."""
        if (
            student_repr.dim() != 2
            or teacher_repr.dim() != 2
            or not (len(student_repr) == len(teacher_repr) == len(idx))
        ):
            raise ValueError(
                f"crd expects student [B, Ws], teacher [B, Wt] and idx [B]; got "
                f"{tuple(student_repr.shape)}, {tuple(teacher_repr.shape)}, {tuple(idx.shape)}"
            )
        teacher_repr = (
            teacher_repr.detach().clone()
        )  # it may be an inference tensor, which backward cannot save
        drawn = self.sample_negatives(labels)  # [B, K]
        with torch.autocast(device_type=student_repr.device.type, enabled=False):
            z_s = self._embed(self.student_head, student_repr)
            z_t = self._embed(self.teacher_head, teacher_repr)
            if self.form == "nce":
                contrast = torch.cat([idx.to(drawn.device)[:, None], drawn], 1)
                loss = self._binary_nce(z_s, z_t, contrast)
            else:
                sides = (self.memory_teacher, self.memory_student)
                banks = [bank[drawn].float() for bank in sides]
                loss = _info_nce(z_s, z_t, banks[0], self.temperature) + _info_nce(
                    z_t, z_s, banks[1], self.temperature
                )
        if self.training:
            self.update_memory(idx, z_s, z_t)
        return loss


def _initial_bank(rows: int, feat_dim: int, form: str, generator: torch.Generator) -> Tensor:
    """Unit rows (infonce), or CRD's uniform rows in [-1/sqrt(F/3), 1/sqrt(F/3)] (nce)."""
    if form == "nce":
        bound = 1.0 / (feat_dim / 3) ** 0.5
        return torch.rand(rows, feat_dim, generator=generator) * (2 * bound) - bound
    return _unit(torch.randn(rows, feat_dim, generator=generator))


def _nce_loss(scores: Tensor, num_examples: int, eps: float = 1e-7) -> Tensor:
    """CRD's binary NCE on [B, 1 + K] normalised scores (column 0 the positive), noise 1/N each."""
    noise = scores.shape[1] - 1
    noise_mass = noise / num_examples
    positive = scores[:, 0].clamp_min(eps)
    log_positive = torch.log(positive / (positive + noise_mass + eps))
    log_negative = torch.log(noise_mass / (scores[:, 1:] + noise_mass + eps))
    return -(log_positive.sum() + log_negative.sum()) / scores.shape[0]


def crd(
    student_width: int, teacher_width: int, train_labels: Tensor, seed: int = 0, **params
) -> ContrastiveDistillation:
    """The `crd` loss of an objective term: its learnable module, for features of these widths and
    this training set.

    `train_labels` [N]: the training set's labels by example id; `params`: feat_dim, num_negatives,
    temperature, momentum (see `ContrastiveDistillation`).
    """
    return ContrastiveDistillation(student_width, teacher_width, train_labels, seed=seed, **params)
