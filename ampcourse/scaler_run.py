"""Real ``torch.amp.GradScaler`` runs for lessons 04 and 05: FP16 autocast on the CPU, watched from outside.

Three tools, all through GradScaler's *public* API (``scale``, ``unscale_``, ``step``, ``update``,
``get_scale``) plus public ``torch.optim`` hooks:

* :func:`real_scaler_run` trains a tiny model (about 2,200 parameters) under FP16 autocast with a real
  ``GradScaler("cpu", ...)`` whose first scale is far too large, so the first steps overflow in FP16 and
  are skipped while the scale backs off; later, each growth of the scale can overflow again. It records,
  per step, the scale used, the loss, and whether the step was skipped, and
  :meth:`RealRun.simulated` replays the inferred overflows in :func:`ampcourse.scaler_sim.simulate_grad_scaler`,
  which gives the same scales bit for bit.
* :func:`step_anatomy` runs ONE step stage by stage and reports what each call does to the gradients
  (``scale(loss).backward()`` multiplies them by S, ``unscale_`` divides them back, ...), optionally with an
  inf injected into one gradient so the step is skipped and the scale backs off.
* :func:`step_was_skipped` is the rule that tells a skipped step from the outside: the scale shrank.

Why infer anything? GradScaler keeps its ``found_inf`` flags in private per-optimizer state
(``_per_optimizer_states``) and has no public getter for them, and ``scaler.step`` returns whatever
``optimizer.step`` returns (``None`` for SGD, skipped or not). What *is* public: ``get_scale()`` before and
after ``update()`` (:func:`step_was_skipped`), ``torch.isfinite`` on the gradients (the very test the
scaler makes: its unscale kernel flags any inf or NaN among the gradients), and
``optimizer.register_step_post_hook`` (it fires only when ``optimizer.step()`` really runs).

Everything runs on the CPU (FP16 matmuls are slow there, hence the tiny model: the default 200-step run
takes about 0.15 s, plus a one-off second or two in a fresh process, where the first torch optimizer
imports ``torch._dynamo``) and is seeded, so the numbers printed in a notebook are the same on every machine
with the same torch build.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from .scaler_sim import ScalerTrace, _checked_scaler_args, simulate_grad_scaler
from .tables import Table
from .validate import as_int, as_positive

__all__ = ["RealRun", "StepAnatomy", "real_scaler_run", "step_anatomy", "step_was_skipped", "tiny_model"]

N_INPUTS, N_HIDDEN, BATCH_SIZE, N_EXAMPLES = 32, 64, 32, 512


def step_was_skipped(scale_before: float, scale_after: float) -> bool:
    """Whether ``scaler.step(optimizer)`` skipped ``optimizer.step()``, seen from the scale alone.

    Call it with ``scaler.get_scale()`` read before the iteration's ``update()`` and after it::

        scaled_loss = scaler.scale(loss)
        before = scaler.get_scale()   # after scale(): see below
        scaled_loss.backward()
        scaler.step(optimizer)
        scaler.update()
        skipped = step_was_skipped(before, scaler.get_scale())

    Read ``before`` *after* ``scaler.scale(loss)``: until its first call, ``get_scale()`` returns
    ``init_scale`` as given, not the float32 value the scaler multiplies by, so with an ``init_scale``
    that is not exact in float32 (0.7, say) a clean first step would look skipped. On CUDA each
    ``get_scale()`` is a GPU-to-CPU sync (it calls ``.item()``): two per step cost a little time.

    The rule is "the scale shrank". ``update()`` either multiplies the scale by ``backoff_factor`` (< 1:
    a step with an inf or NaN gradient, which ``step`` skipped), or leaves it alone, or multiplies it by
    ``growth_factor`` (> 1). Each product is rounded to float32, and rounding never reverses an
    inequality, so a clean step can never make the scale smaller: **a smaller scale always means a skipped
    step** (no false alarms).

    The converse can fail: a skipped step whose backoff leaves the scale *unchanged* goes unseen. That
    happens only when ``scale × backoff_factor`` rounds back to ``scale`` in float32:

    * the scale is already 0 (after some 150 backoffs in a row by 0.5, it underflows float32) — then no
      rule can tell, and this function raises ``ValueError`` rather than guess;
    * the scale is a tiny float32 subnormal (below about 1e-38), where float32 steps are coarse;
    * ``backoff_factor`` is within about 6e-8 of 1 (a relative change below half a float32 ULP).

    None of these happens with sensible settings (the default backoff 0.5 halves the scale exactly). Two
    more caveats, about the *loop* rather than the rule: with several optimizers, ``update()`` backs off
    when *any* of them saw an inf, so a smaller scale means at least one optimizer skipped its step, not
    each; and ``update(new_scale)`` sets the scale by hand, which says nothing about skipping.

    Raises:
        TypeError: if a scale is not a real number.
        ValueError: if a scale is negative or NaN, or ``scale_before`` is 0.

    Example:
        >>> step_was_skipped(65536.0, 32768.0), step_was_skipped(65536.0, 65536.0), step_was_skipped(65536.0, 131072.0)
        (True, False, False)
    """
    before = _as_scale("scale_before", scale_before)
    after = _as_scale("scale_after", scale_after)
    if before == 0:
        raise ValueError(
            "scale_before is 0: a scale of 0 stays 0 whether or not the step was skipped, so the scale "
            "cannot tell; check the gradients with torch.isfinite instead"
        )
    return after < before


def _as_scale(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, e.g. scaler.get_scale() (got {value!r})")
    value = float(value)
    if math.isnan(value) or value < 0:
        raise ValueError(f"{name} must be >= 0, as GradScaler's scale is (got {value!r})")
    return value


def tiny_model(seed: int = 0) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    """The lessons' tiny regression model (32 → 64 → 1, tanh; 2,177 parameters) and its data.

    Returns ``(model, inputs, targets)``: 512 examples of a noisy one-neuron teacher, all seeded by ``seed``
    (the global RNG is left as it was).
    """
    seed = as_int("seed", seed, minimum=0)
    generator = torch.Generator().manual_seed(seed)
    inputs = torch.randn(N_EXAMPLES, N_INPUTS, generator=generator)
    teacher = torch.randn(N_INPUTS, 1, generator=generator) / math.sqrt(N_INPUTS)
    targets = torch.tanh(3 * inputs @ teacher) + 0.1 * torch.randn(N_EXAMPLES, 1, generator=generator)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = nn.Sequential(nn.Linear(N_INPUTS, N_HIDDEN), nn.Tanh(), nn.Linear(N_HIDDEN, 1))
    return model, inputs, targets


def _batch(inputs: torch.Tensor, targets: torch.Tensor, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    start = (step * BATCH_SIZE) % N_EXAMPLES
    return inputs[start:start + BATCH_SIZE], targets[start:start + BATCH_SIZE]


def _fp16_loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The forward pass under FP16 autocast: the matmuls run in FP16; ``mse_loss`` autocasts to FP32."""
    with torch.autocast("cpu", dtype=torch.float16):
        return nn.functional.mse_loss(model(x), y)


def _flat_params(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).clone()


def _flat_grads(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.grad.detach().reshape(-1) for p in model.parameters()]).clone()


class StepCounter:
    """Counts real ``optimizer.step()`` calls through the public ``register_step_post_hook``."""

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        self.calls = 0
        self.handle = optimizer.register_step_post_hook(self._hook)

    def _hook(self, optimizer, args, kwargs) -> None:
        self.calls += 1


@dataclass(frozen=True)
class RealRun:
    """A real FP16 training run under ``torch.amp.GradScaler`` (see :func:`real_scaler_run`).

    Per-step tuples, one entry per step:

    Attributes:
        scales: ``scaler.get_scale()`` before the step: the scale the loss was multiplied by.
        scales_after: ``scaler.get_scale()`` after the step's ``update()``.
        found_inf: whether the step was skipped, **inferred** from the two scales by
            :func:`step_was_skipped`; this is the sequence to feed the simulator.
        losses: the (unscaled, FP32) loss of the step's batch. It is finite even on skipped steps:
            the overflow happens in the FP16 backward pass, not in the loss.
        nonfinite_grads: ground truth from ``torch.isfinite``: some gradient was inf or NaN after the
            scaled backward pass (what the scaler's inf check looks for).
        optimizer_stepped: ground truth from ``optimizer.register_step_post_hook``: ``optimizer.step()`` ran.
        params_changed: ground truth from the parameters themselves: some parameter changed.
        settings: ``init_scale, growth_factor, backoff_factor, growth_interval`` as passed to GradScaler.
    """

    steps: int
    seed: int
    lr: float
    n_params: int
    settings: dict[str, float | int] = field(repr=False)
    scales: tuple[float, ...] = field(repr=False)
    scales_after: tuple[float, ...] = field(repr=False)
    found_inf: tuple[bool, ...] = field(repr=False)
    losses: tuple[float, ...] = field(repr=False)
    nonfinite_grads: tuple[bool, ...] = field(repr=False)
    optimizer_stepped: tuple[bool, ...] = field(repr=False)
    params_changed: tuple[bool, ...] = field(repr=False)

    @property
    def n_skipped(self) -> int:
        """How many steps were skipped (by the scale rule)."""
        return sum(self.found_inf)

    @property
    def skipped_steps(self) -> list[int]:
        """The indices of the skipped steps."""
        return [i for i, skipped in enumerate(self.found_inf) if skipped]

    @property
    def final_scale(self) -> float:
        """The scale after the last update (what the next step would use)."""
        return self.scales_after[-1]

    def simulated(self) -> ScalerTrace:
        """:func:`~ampcourse.scaler_sim.simulate_grad_scaler` fed with this run's inferred ``found_inf``."""
        return simulate_grad_scaler(self.found_inf, **self.settings)

    def matches_simulator(self) -> bool:
        """Whether the simulator reproduces every scale of the run (and the final one), exactly."""
        trace = self.simulated()
        return trace.scales == self.scales and trace.final_scale == self.final_scale

    def summary(self) -> str:
        """One line: steps, skipped steps, scale range, loss, simulator agreement."""
        same = "identical" if self.matches_simulator() else "DIFFERENT"
        return (f"real fp16 run: {self.steps} steps, {self.n_skipped} skipped {self.skipped_steps[:12]}"
                f"{'…' if self.n_skipped > 12 else ''}; scale 2^{math.log2(self.scales[0]):g} → "
                f"2^{math.log2(self.final_scale):g}; loss {self.losses[0]:.3f} → {self.losses[-1]:.3f}; "
                f"simulator {same}")


MAX_REAL_STEPS = 100_000


def real_scaler_run(
    steps: int = 200,
    *,
    seed: int = 0,
    init_scale: float = 2.0**24,
    growth_factor: float = 2.0,
    backoff_factor: float = 0.5,
    growth_interval: int = 20,
    lr: float = 0.05,
) -> RealRun:
    """Train :func:`tiny_model` for ``steps`` SGD steps under FP16 autocast and a real CPU ``GradScaler``.

    The loop is the textbook one (``zero_grad``, forward under ``torch.autocast("cpu", torch.float16)``,
    ``scaler.scale(loss).backward()``, ``scaler.step(optimizer)``, ``scaler.update()``), with readings
    taken around it through public calls only (see :class:`RealRun`).

    With the defaults, ``init_scale = 2**24`` makes the scaled gradient of the FP16 output exceed FP16's
    65504 in the first steps: they are skipped while the scale halves down to about 2**16; from then on
    the scale grows every ``growth_interval = 20`` clean steps, and a growth that goes too far overflows
    again and backs off (torch's default interval, 2000, would show this only after thousands of steps).

    Args:
        steps: number of training steps; an int >= 1.
        seed: seeds the model and its data; an int >= 0.
        init_scale, growth_factor, backoff_factor, growth_interval: passed to ``GradScaler``; the same
            checks as :func:`~ampcourse.scaler_sim.simulate_grad_scaler`.
        lr: SGD learning rate; > 0.

    Example:
        >>> run = real_scaler_run(50)
        >>> run.n_skipped > 0, run.matches_simulator()
        (True, True)
    """
    steps = as_int("steps", steps, minimum=1)
    if steps > MAX_REAL_STEPS:
        raise ValueError(f"steps must be at most {MAX_REAL_STEPS:,} (got {steps:,}): each is a real training step, "
                         "and more would not finish in reasonable time (scaler_sim.simulate_grad_scaler simulates "
                         "longer runs)")
    seed = as_int("seed", seed, minimum=0)
    init_scale, growth_factor, backoff_factor, growth_interval = _checked_scaler_args(
        init_scale, growth_factor, backoff_factor, growth_interval)
    lr = as_positive("lr", lr)
    settings = {"init_scale": init_scale, "growth_factor": growth_factor, "backoff_factor": backoff_factor,
                "growth_interval": growth_interval}

    model, inputs, targets = tiny_model(seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    scaler = torch.amp.GradScaler("cpu", **settings)
    counter = StepCounter(optimizer)
    record: dict[str, list] = {name: [] for name in (
        "scales", "scales_after", "found_inf", "losses", "nonfinite_grads", "optimizer_stepped",
        "params_changed")}
    try:
        for step in range(steps):
            x, y = _batch(inputs, targets, step)
            optimizer.zero_grad(set_to_none=True)
            loss = _fp16_loss(model, x, y)
            scaled_loss = scaler.scale(loss)
            # Read after scale(): before its first call, get_scale() returns init_scale as given, not yet
            # rounded to the float32 the scaler multiplies by.
            scale = scaler.get_scale()
            scaled_loss.backward()
            nonfinite = not bool(torch.isfinite(_flat_grads(model)).all())
            params, calls = _flat_params(model), counter.calls
            scaler.step(optimizer)
            scaler.update()
            scale_after = scaler.get_scale()
            record["scales"].append(scale)
            record["scales_after"].append(scale_after)
            record["found_inf"].append(step_was_skipped(scale, scale_after))
            record["losses"].append(loss.item())
            record["nonfinite_grads"].append(nonfinite)
            record["optimizer_stepped"].append(counter.calls > calls)
            record["params_changed"].append(not torch.equal(params, _flat_params(model)))
    finally:
        counter.handle.remove()
    return RealRun(steps=steps, seed=seed, lr=lr, n_params=sum(p.numel() for p in model.parameters()),
                   settings=settings, **{name: tuple(values) for name, values in record.items()})


@dataclass(frozen=True)
class StepAnatomy:
    """One AMP step, stage by stage (see :func:`step_anatomy`).

    Attributes:
        rows: one dict per stage, the columns of :data:`ANATOMY_COLUMNS`.
        scale_before, scale_after: ``get_scale()`` before the step and after ``update()``.
        found_inf: some gradient was inf or NaN (from ``torch.isfinite``; GradScaler's own flag is private).
        optimizer_stepped: ``optimizer.step()`` ran (from ``register_step_post_hook``).
        params_changed: some parameter changed.
        scaled_ratio, unscaled_ratio: ‖grad‖ / ‖FP32 grad‖ after ``scale(loss).backward()`` (≈ S) and
            after ``unscale_`` (≈ 1), over the finite gradient values (None if there are none). Not exactly
            S and 1: the forward and backward passes ran in FP16, the reference in FP32.
    """

    scale_before: float
    scale_after: float
    inject_inf: bool
    found_inf: bool
    optimizer_stepped: bool
    params_changed: bool
    scaled_ratio: float | None
    unscaled_ratio: float | None
    rows: tuple[dict[str, Any], ...] = field(repr=False)

    def table(self) -> Table:
        """The rows as a :class:`~ampcourse.tables.Table` (HTML in JupyterLab, text elsewhere)."""
        title = (f"one AMP step at S = {_fmt_scale(self.scale_before)}"
                 f"{' with an inf injected into one gradient' if self.inject_inf else ''}")
        return Table(self.rows, columns=ANATOMY_COLUMNS, formats={
            "max |grad|": _fmt_number, RATIO_COLUMN: _fmt_number, "scale": _fmt_scale}, title=title)


RATIO_COLUMN = "‖grad‖ / ‖FP32 grad‖ (finite values)"
"""The norm-ratio column: the norms over the finite values only (an injected inf would make it inf)."""

ANATOMY_COLUMNS = ("stage", "call", "max |grad|", RATIO_COLUMN, "inf/NaN values", "scale",
                   "what happened")


def _fmt_number(value: float | None) -> str:
    return "—" if value is None else f"{value:.6g}"


def _fmt_scale(value: float | None) -> str:
    """``16,777,216`` for a whole scale (they usually are powers of two), else ``0.1`` or ``3.4e+38``."""
    if value is None:
        return "—"
    return f"{value:,.0f}" if value.is_integer() and value < 1e15 else f"{value:.6g}"


class _AnatomyNotes:
    """The bookkeeping of :func:`step_anatomy`: after each scaler call, one row that measures the gradients (or
    the step, or the scale) and says what happened, so the calls themselves read in sequence."""

    def __init__(self, model: nn.Module, reference: torch.Tensor) -> None:
        self.model, self.reference, self.rows = model, reference, []
        self.params: torch.Tensor | None = None
        self.row("1. FP32 reference", "loss.backward()  (no autocast, no scaler)", reference, None,
                 "the true gradients, for comparison")

    def row(self, stage: str, call: str, grads: torch.Tensor | None, scale: float | None, note: str) -> float | None:
        ratio = maximum = nonfinite = None
        if grads is not None:
            finite = torch.isfinite(grads)
            nonfinite = f"{int((~finite).sum()):,} of {grads.numel():,}"
            maximum = grads.abs().max().item()  # inf or nan as soon as one value is
            if finite.any():
                ratio = (grads[finite].double().norm() / self.reference[finite].double().norm()).item()
        self.rows.append({"stage": stage, "call": call, "max |grad|": maximum, RATIO_COLUMN: ratio,
                          "inf/NaN values": nonfinite, "scale": scale, "what happened": note})
        return ratio

    def scaled_backward(self, scale: float) -> float | None:
        grads = _flat_grads(self.model)
        note = (f"FP16 backward of loss × S: the gradients are S = {_fmt_scale(scale)} times too large"
                if torch.isfinite(grads).all() else
                f"FP16 backward of loss × S overflowed: S = {_fmt_scale(scale)} is too large for FP16")
        return self.row("2. scaled backward", "scaler.scale(loss).backward()", grads, scale, note)

    def inject_inf(self, scale: float) -> None:
        """Set one gradient value to inf, as an FP16 overflow in the backward pass would leave it."""
        with torch.no_grad():
            next(iter(self.model.parameters())).grad.view(-1)[0] = math.inf
        self.row("2b. inject inf", "param.grad.view(-1)[0] = inf", _flat_grads(self.model), scale,
                 "one gradient value made inf, as an FP16 overflow in the backward pass leaves it")

    def unscaled(self, scale: float) -> tuple[float | None, bool]:
        """The unscale row and the inf check that ``unscale_`` does inside (read here with ``torch.isfinite``)."""
        grads = _flat_grads(self.model)
        ratio = self.row("3. unscale", "scaler.unscale_(optimizer)", grads, scale,
                         "the gradients × 1/S: back to their true size (an inf or NaN stays one)")
        found_inf = not bool(torch.isfinite(grads).all())
        self.row("4. inf check", "(inside unscale_; read here with torch.isfinite)", None, scale,
                 "found_inf = 1: an inf or NaN, so step() will skip optimizer.step()" if found_inf else
                 "found_inf = 0: all finite, so step() will call optimizer.step()")
        self.params = _flat_params(self.model)  # to tell whether step() moves them
        return ratio, found_inf

    def stepped(self, scale: float, stepped: bool) -> bool:
        changed = not torch.equal(self.params, _flat_params(self.model))
        self.row("5. step", "scaler.step(optimizer)", None, scale,
                 f"optimizer.step() {'ran' if stepped else 'was SKIPPED'}; the parameters "
                 f"{'changed' if changed else 'did not change'}")
        return changed

    def updated(self, scale: float, scale_after: float) -> None:
        verdict = ("backed off: the step was skipped" if step_was_skipped(scale, scale_after)
                   else "unchanged: a clean step, growth only after growth_interval of them")
        self.row("6. update", "scaler.update()", None, scale_after, f"new scale {_fmt_scale(scale_after)} ({verdict})")


def _reference_grads(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The FP32 gradients of the same model on the same batch (no autocast, no scaling); ``.grad`` cleared after."""
    nn.functional.mse_loss(model(x), y).backward()
    reference = _flat_grads(model)
    model.zero_grad(set_to_none=True)
    return reference


def step_anatomy(scale: float = 2.0**16, *, inject_inf: bool = False, seed: int = 0,
                 backoff_factor: float = 0.5, lr: float = 0.05) -> StepAnatomy:
    """Run ONE FP16 AMP step on :func:`tiny_model` call by call, and describe each stage's gradients.

    Stages (one row each): an FP32 reference backward pass on the same batch (no autocast, no scaler);
    ``scaler.scale(loss).backward()`` under FP16 autocast (gradients ≈ S × the reference); with
    ``inject_inf``, one gradient value set to inf, as an FP16 overflow in the backward pass would leave it;
    ``scaler.unscale_(optimizer)`` (gradients back to the reference's size; an inf stays inf); the inf
    check, which GradScaler does *inside* ``unscale_`` (``torch._amp_foreach_non_finite_check_and_unscale_``
    unscales and sets ``found_inf`` in one kernel) and keeps in private state, so the course reads the same
    fact with ``torch.isfinite``;
    ``scaler.step(optimizer)`` (did ``optimizer.step()`` run, did the parameters move?); and
    ``scaler.update()`` (the new scale: ``scale × backoff_factor`` after an inf, else unchanged, since
    one clean step is far from a growth interval).

    Args:
        scale: the GradScaler's ``init_scale``, i.e. this step's S; > 0 and finite in float32.
        inject_inf: put an inf into one gradient value after the backward pass.
        seed: seeds the model and its data; an int >= 0.
        backoff_factor: the scaler's backoff factor; in (0, 1).
        lr: SGD learning rate; > 0.

    Example:
        >>> anatomy = step_anatomy(inject_inf=True)
        >>> anatomy.found_inf, anatomy.optimizer_stepped, anatomy.scale_after
        (True, False, 32768.0)
    """
    if not isinstance(inject_inf, bool):
        raise TypeError(f"inject_inf must be a bool (got {inject_inf!r})")
    seed = as_int("seed", seed, minimum=0)
    lr = as_positive("lr", lr)
    scale, _, backoff_factor, _ = _checked_scaler_args(scale, 2.0, backoff_factor, 2000)
    model, inputs, targets = tiny_model(seed)
    x, y = _batch(inputs, targets, 0)
    notes = _AnatomyNotes(model, _reference_grads(model, x, y))
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    scaler = torch.amp.GradScaler("cpu", init_scale=scale, backoff_factor=backoff_factor)
    counter = StepCounter(optimizer)
    try:
        # the AMP step: forward under autocast, then scale → backward → unscale_ → step → update (each call
        # followed by a note that measures what it did)
        with torch.autocast(device_type="cpu", dtype=torch.float16):
            loss = nn.functional.mse_loss(model(x), y)
        scaler.scale(loss).backward()
        scale = scaler.get_scale()  # the float32 value the loss was multiplied by
        scaled_ratio = notes.scaled_backward(scale)
        if inject_inf:
            notes.inject_inf(scale)
        scaler.unscale_(optimizer)
        unscaled_ratio, found_inf = notes.unscaled(scale)
        scaler.step(optimizer)
        changed = notes.stepped(scale, stepped=counter.calls > 0)
        scaler.update()
        notes.updated(scale, scaler.get_scale())
    finally:
        counter.handle.remove()
    return StepAnatomy(scale_before=scale, scale_after=scaler.get_scale(), inject_inf=inject_inf,
                       found_inf=found_inf, optimizer_stepped=counter.calls > 0, params_changed=changed,
                       scaled_ratio=scaled_ratio, unscaled_ratio=unscaled_ratio, rows=tuple(notes.rows))


def nan_origin(scale: float = 2.0**24, seed: int = 0) -> Table:
    """Where the NaNs of a real FP16 overflow come from: one scaled backward pass of :func:`tiny_model` at scale
    ``scale``, with the count of +inf, -inf and NaN values in each gradient, from the output back to the weights.

    The output gradient (float16) overflows to +inf and -inf — one sign per example — and so does every gradient
    on the way back through tanh, but none is NaN there. The NaNs appear in the weight and bias gradients: their
    matmuls (and sums) add the examples' +inf and -inf over the batch, and inf − inf = NaN.

    Example::

        >>> rows = nan_origin().rows
        >>> [(r["gradient"], r["NaN"]) for r in rows][:2]
        [('∂loss/∂output  (model[2]’s output)', 0), ('∂loss/∂tanh output', 0)]
    """
    scale = as_positive("scale", scale)
    model, inputs, targets = tiny_model(as_int("seed", seed, minimum=0))
    x, y = _batch(inputs, targets, 0)
    seen: dict[str, torch.Tensor] = {}

    def keep(name: str):
        def hook(grad: torch.Tensor) -> None:
            seen[name] = grad.detach().clone()
        return hook

    with torch.autocast("cpu", dtype=torch.float16):
        pre = model[0](x)
        pre.register_hook(keep("∂loss/∂(x·W0ᵀ + b0)  (into tanh)"))
        act = model[1](pre)
        act.register_hook(keep("∂loss/∂tanh output"))
        out = model[2](act)
        out.register_hook(keep("∂loss/∂output  (model[2]’s output)"))
        loss = nn.functional.mse_loss(out, y)
    (loss * scale).backward()  # what scaler.scale(loss).backward() does
    order = ["∂loss/∂output  (model[2]’s output)", "∂loss/∂tanh output", "∂loss/∂(x·W0ᵀ + b0)  (into tanh)"]
    grads = [(name, seen[name]) for name in order] + [(f"{name}.grad", p.grad) for name, p in
                                                     reversed(list(model.named_parameters()))]
    rows = [{"gradient": name, "dtype": _dtype_short(g.dtype), "+inf": int((g == math.inf).sum()),
             "-inf": int((g == -math.inf).sum()), "NaN": int(g.isnan().sum()), "values": g.numel()}
            for name, g in grads]
    return Table(rows, columns=["gradient", "dtype", "+inf", "-inf", "NaN", "values"],
                 title=f"one FP16 backward pass of loss × {_fmt_scale(scale)}: where the NaNs appear")


def _dtype_short(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")
