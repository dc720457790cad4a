"""Lesson 06, memory: the bytes autograd saves for backward (:func:`saved_activation_bytes`, each storage
once, parameters and their autocast copies apart), parameters/gradients/optimizer state by dtype
(:func:`state_bytes`), the CUDA allocator's peak (:func:`peak_memory_bytes`) and the largest batch a budget
holds. Also used by ``capstone.py`` and ``widgets/lesson06.py``."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch

from ..validate import as_int
from .timing import _run
from .units import _as_device

# --- memory ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ActivationReport:
    """What autograd saved for backward during one call, each storage counted once.

    Attributes:
        by_dtype: bytes of saved activations by dtype (tensors computed from the data).
        parameter_bytes: bytes of saved storages that *are* parameters (not counted: they exist anyway).
        parameter_copies: bytes by dtype of saved casts/views-with-a-copy of parameters (autocast's
            float16/bfloat16 weights): extra memory, but fixed per step, not per sample.
        tensors: how many saved tensors were seen (a storage may be saved several times).
    """

    by_dtype: dict[torch.dtype, int]
    parameter_bytes: int = 0
    parameter_copies: dict[torch.dtype, int] = field(default_factory=dict)
    tensors: int = 0

    @property
    def total(self) -> int:
        """Activation bytes (parameters and their copies excluded)."""
        return sum(self.by_dtype.values())

    @property
    def copies_total(self) -> int:
        return sum(self.parameter_copies.values())

    @property
    def held_for_backward(self) -> int:
        """Activations plus parameter copies: the memory the graph holds beyond the parameters."""
        return self.total + self.copies_total


_PASS_THROUGH = ("ToCopyBackward", "TBackward", "ViewBackward", "TransposeBackward", "PermuteBackward",
                 "ExpandBackward", "UnsafeViewBackward", "AliasBackward", "ReshapeAliasBackward")


def _derived_from_parameter(tensor: torch.Tensor, parameters: set[int]) -> bool:
    """True if ``tensor`` is a cast/view chain of one parameter (e.g. autocast's bf16 copy of a weight)."""
    node = tensor.grad_fn
    for _ in range(6):
        if node is None:
            return False
        name = type(node).__name__
        if name == "AccumulateGrad":
            return id(node.variable) in parameters
        if not name.startswith(_PASS_THROUGH):
            return False
        nexts = [n for n, _ in node.next_functions if n is not None]
        if len(nexts) != 1:
            return False
        node = nexts[0]
    return False


def saved_activation_bytes(fn: Callable[[], Any],
                           parameters: Iterable[torch.Tensor] | torch.nn.Module = ()) -> ActivationReport:
    """Bytes autograd saves for backward while ``fn()`` runs (usually a forward pass and a loss).

    Each storage is counted once, with its full size (a saved view keeps its whole storage alive).
    Storages shared with ``parameters`` (a module or an iterable of tensors) are parameters, not
    activations; leaf tensors that require grad are treated as parameters too. Saved tensors computed
    from a parameter by casts and views only (autocast's low-precision weight copies) go to
    ``parameter_copies``. Works on every device, without running backward.

    >>> lin = torch.nn.Linear(4, 3)
    >>> x = torch.randn(2, 4)
    >>> saved_activation_bytes(lambda: torch.relu(lin(x)), lin).by_dtype   # x (2×4) + relu output (2×3)
    {torch.float32: 56}
    """
    if not callable(fn):
        raise TypeError(f"fn must be a function of no arguments (got {type(fn).__name__} {fn!r})")
    if isinstance(parameters, torch.nn.Module):
        parameters = list(parameters.parameters())
    try:
        params = [p for p in parameters]
    except TypeError:
        raise TypeError(f"parameters must be a module or an iterable of tensors (got {parameters!r})") from None
    if not all(isinstance(p, torch.Tensor) for p in params):
        raise TypeError("parameters must be a module or an iterable of tensors")
    param_ids = {id(p) for p in params}
    param_storages = {(p.device, p.untyped_storage().data_ptr()) for p in params}
    seen: dict[tuple, torch.UntypedStorage] = {}  # keeps storages alive so their addresses are not reused
    by_dtype: dict[torch.dtype, int] = {}
    copies: dict[torch.dtype, int] = {}
    parameter_bytes = 0
    count = 0

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        nonlocal parameter_bytes, count
        count += 1
        storage = tensor.untyped_storage()
        key = (tensor.device, storage.data_ptr())
        if key in seen:
            return tensor
        seen[key] = storage
        size = storage.nbytes()
        if key in param_storages or (tensor.is_leaf and tensor.requires_grad):
            parameter_bytes += size
        elif _derived_from_parameter(tensor, param_ids):
            copies[tensor.dtype] = copies.get(tensor.dtype, 0) + size
        else:
            by_dtype[tensor.dtype] = by_dtype.get(tensor.dtype, 0) + size
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        _run(fn, "the activation count")
    seen.clear()
    return ActivationReport(dict(sorted(by_dtype.items(), key=str)), parameter_bytes,
                            dict(sorted(copies.items(), key=str)), count)


def _add(counts: dict[torch.dtype, int], tensor: torch.Tensor, seen: set) -> None:
    key = (tensor.device, tensor.untyped_storage().data_ptr())
    if key in seen:
        return
    seen.add(key)
    counts[tensor.dtype] = counts.get(tensor.dtype, 0) + tensor.untyped_storage().nbytes()


def state_bytes(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None
                ) -> dict[str, dict[torch.dtype, int]]:
    """Bytes by dtype of ``"parameters"``, ``"gradients"`` (those that exist now) and ``"optimizer state"``.

    Each storage is counted once. Adam keeps two tensors per parameter (``exp_avg``, ``exp_avg_sq``, in
    the parameter's dtype) plus a one-element ``step`` tensor.
    """
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module (got {type(model).__name__})")
    if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"optimizer must be a torch.optim.Optimizer or None (got {type(optimizer).__name__})")
    params: dict[torch.dtype, int] = {}
    grads: dict[torch.dtype, int] = {}
    opt: dict[torch.dtype, int] = {}
    seen: set = set()
    for p in model.parameters():
        _add(params, p, seen)
    for p in model.parameters():
        if p.grad is not None:
            _add(grads, p.grad, seen)
    if optimizer is not None:
        for state in optimizer.state.values():
            for value in state.values():
                if isinstance(value, torch.Tensor):
                    _add(opt, value, seen)
    return {"parameters": params, "gradients": grads, "optimizer state": opt}


def peak_memory_bytes(fn: Callable[[], Any], device: torch.device | str) -> int | None:
    """Peak bytes allocated on ``device`` while ``fn()`` runs (CUDA allocator statistics).

    The peak counts everything allocated at that moment (model, optimizer state, activations). Returns
    ``None`` without running ``fn`` where the allocator keeps no peak statistics (CPU, MPS): use
    :func:`saved_activation_bytes` and :func:`state_bytes` there.
    """
    if not callable(fn):
        raise TypeError(f"fn must be a function of no arguments (got {type(fn).__name__} {fn!r})")
    device = _as_device(device)
    if device.type != "cuda":
        return None
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    _run(fn, "the peak-memory run")
    torch.cuda.synchronize(device)
    return int(torch.cuda.max_memory_allocated(device))


def largest_batch_estimate(memory_budget_bytes: int, per_sample_bytes: int, fixed_bytes: int) -> int:
    """How many samples fit: ``floor((budget − fixed) / per_sample)``, 0 if even the fixed part does not fit.

    ``fixed_bytes``: what does not grow with the batch (parameters, gradients, optimizer state, autocast's
    weight copies); ``per_sample_bytes``: what does (activations per sample). A first estimate only: the
    allocator's fragmentation and temporary buffers need headroom.

    >>> largest_batch_estimate(1000, 30, 100)
    30
    """
    budget = as_int("memory_budget_bytes", memory_budget_bytes, minimum=1)
    per_sample = as_int("per_sample_bytes", per_sample_bytes, minimum=1)
    fixed = as_int("fixed_bytes", fixed_bytes, minimum=0)
    return max(0, (budget - fixed) // per_sample)
