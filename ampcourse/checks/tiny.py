"""The tiny, seeded problem that the accumulation checks (lessons 05 and 09) train on.

A 6 → 8 → 3 MLP with cross-entropy on class indices: small enough that float16 autocast is cheap on a
CPU, and an exact FP32 reference gradient is one backward pass away.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F


def tiny_model(device: torch.device | str, seed: int = 0) -> torch.nn.Module:
    """``Linear(6, 8) → Tanh → Linear(8, 3)``, initialised from ``seed`` (the global RNG is left alone)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3)).to(device)


def micro_batches(device: torch.device | str, n: int, size: int = 4,
                  seed: int = 1) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``n`` micro-batches ``(x, y)`` of ``size`` rows: 6 features, class indices in 0..2."""
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(size, 6, generator=g).to(device), torch.randint(0, 3, (size,), generator=g).to(device))
            for _ in range(n)]


def window_mean_grads(model: torch.nn.Module, window: list[tuple[torch.Tensor, torch.Tensor]]) -> list[torch.Tensor]:
    """FP32 reference: the gradient of the mean of the window's micro-batch losses (on a copy of ``model``)."""
    reference = copy.deepcopy(model)
    loss = sum(F.cross_entropy(reference(x), y) for x, y in window) / len(window)
    loss.backward()
    return [p.grad.detach().clone() for p in reference.parameters()]


def grad_norm(grads: list[torch.Tensor]) -> float:
    """The total 2-norm of a list of gradients (as ``clip_grad_norm_`` measures it)."""
    return torch.sqrt(sum((g.float() ** 2).sum() for g in grads)).item()


def cosine(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    """The cosine of the angle between two lists of gradients, taken as one long vector each."""
    x = torch.cat([g.float().flatten() for g in a])
    y = torch.cat([g.float().flatten() for g in b])
    return (x @ y / (x.norm() * y.norm()).clamp_min(1e-30)).item()


def require_clipped(task: str, grads: list[torch.Tensor], max_norm: float, scale: float,
                    log: list[str] | None = None) -> None:
    """Fail unless the gradients the optimizer stepped with were clipped to ``max_norm`` after ``unscale_``.

    The checks choose ``max_norm`` below the true norm, so a right answer steps with a norm of ``max_norm``
    (within 5 %). Clipping before ``unscale_`` (or never calling it) compares ``max_norm`` with gradients
    ×``scale``, so the optimizer ends up with gradients far below the threshold; not clipping leaves them
    above it. ``log``: the spy scaler's call log, which tells an explicit ``unscale_`` (before ``scaler.step``)
    from the one ``scaler.step`` makes itself.
    """
    from . import fail

    seen = grad_norm(grads)
    explicit = log is not None and "unscale_" in log and (
        "scaler.step" not in log or log.index("unscale_") < log.index("scaler.step"))
    if seen < max_norm / 100:
        if log is not None and not explicit:
            raise fail(task, f"you never called `scaler.unscale_(optimizer)`, so `clip_grad_norm_` saw gradients "
                             f"still ×{scale:g} and clipped them far too hard (the optimizer got norm {seen:.3g}, "
                             f"max_norm is {max_norm:.3g}). Call `scaler.unscale_(optimizer)` before clipping.")
        raise fail(task, f"you clipped before `unscale_`: the threshold {max_norm:.3g} was compared with gradients "
                         f"×{scale:g}, so the optimizer got gradients of norm {seen:.3g}, far below it. Call "
                         "`scaler.unscale_(optimizer)` first, then `clip_grad_norm_`.")
    if seen < max_norm * 0.95:
        raise fail(task, f"the optimizer stepped with gradients of norm {seen:.3g}, below max_norm = {max_norm:.3g} "
                         "although the true gradients were larger: clip the *total* norm to exactly max_norm with "
                         "`clip_grad_norm_(model.parameters(), max_norm)` (not `clip_grad_value_`, not another "
                         "threshold, not per parameter).")
    if seen > max_norm * 1.05:
        raise fail(task, f"the optimizer stepped with gradients of norm {seen:.3g}, above max_norm = {max_norm:.3g}: "
                         "clip the *total* norm with `torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)` "
                         "after `unscale_`, before `scaler.step` (`clip_grad_value_` caps single values, not the "
                         "norm).")
