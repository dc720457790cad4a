"""Lesson 06, where AMP pays off: :func:`bf16_sweep` (FP32 against one AMP mode across layer widths) and
:func:`compare_products` (matrix products), both timed in interleaved rounds and judged by
:func:`ampcourse.bench.steps.judge`."""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ..validate import as_int, as_positive
from .flops import MatmulResult, achieved_flops, matmul_throughput
from .hardware import mode_unavailable_reason
from .steps import (
    CLEAR_DIFFERENCE,
    MAX_TIMED_STEPS,
    _refuse_huge_step,
    judge,
    mlp_problem,
    mlp_step_flops,
    train_step_fn,
)
from .timing import time_fn
from .units import _as_device, format_flops, format_time

# --- where does AMP pay off? a size sweep -------------------------------------------------------------------

@dataclass(frozen=True)
class SweepPoint:
    """One width of :func:`bf16_sweep`: per-round median step times of FP32 and of the AMP mode.

    A round times both modes back to back (their order alternates between rounds, so a drift of the
    machine's speed — clocks, other processes — does not always hit the same mode).
    """

    width: int
    depth: int
    batch: int
    fp32: tuple[float, ...]
    low: tuple[float, ...]

    @property
    def ratios(self) -> tuple[float, ...]:
        """FP32 time / AMP time, round by round (> 1: AMP was faster in that round)."""
        return tuple(f / lo for f, lo in zip(self.fp32, self.low, strict=True))

    @property
    def speedup(self) -> float:
        """The median of the rounds' ratios."""
        return statistics.median(self.ratios)

    @property
    def spread(self) -> float:
        """(largest − smallest ratio) / median ratio: 0 when every round agrees."""
        return (max(self.ratios) - min(self.ratios)) / self.speedup

    @property
    def fp32_achieved(self) -> float:
        """Matrix-product FLOP/s of the FP32 step (median over rounds): low = overhead-bound, high = compute-bound."""
        return achieved_flops(mlp_step_flops(self.width, self.depth, self.batch), statistics.median(self.fp32))

    @property
    def low_achieved(self) -> float:
        """The same for the AMP step."""
        return achieved_flops(mlp_step_flops(self.width, self.depth, self.batch), statistics.median(self.low))


@dataclass(frozen=True)
class Bf16Sweep:
    """The result of :func:`bf16_sweep`. ``stopped`` says why the sweep ended early (``None``: every width ran)."""

    mode: str
    device: str
    points: tuple[SweepPoint, ...]
    rounds: int
    noise_threshold: float
    stopped: str | None = None

    @property
    def noisy(self) -> tuple[SweepPoint, ...]:
        """The points whose rounds disagree by more than ``noise_threshold`` (a busy machine: rerun)."""
        return tuple(p for p in self.points if p.spread > self.noise_threshold)

    def pays_off_from(self) -> int | None:
        """The smallest width from which the AMP step was faster by :func:`judge`'s rule (median ratio beyond
        :data:`CLEAR_DIFFERENCE`, every round > 1) at every larger width measured, or ``None`` if it was not
        at the largest width."""
        width = None
        for point in reversed(self.points):
            if judge(point.speedup, point.ratios, False, self.noise_threshold) != "faster":
                break
            width = point.width
        return width

    def lines(self) -> list[str]:
        out = [f"one training step, {self.points[0].depth} × Linear(width) + ReLU, batch {self.points[0].batch}, "
               f"Adam; {self.mode} autocast vs fp32 on {self.device}; {self.rounds} rounds per width"
               if self.points else f"no width measured on {self.device}"]
        for p in self.points:
            out.append(f"width {p.width:>5}: {self.mode} {p.speedup:.2f}× the fp32 speed (rounds "
                       f"{min(p.ratios):.2f}–{max(p.ratios):.2f}){'  <- noisy: rerun' if p in self.noisy else ''}; "
                       f"fp32 step {format_flops(p.fp32_achieved)}, {self.mode} step {format_flops(p.low_achieved)}")
        if self.stopped:
            out.append(self.stopped)
        return out

    def verdict(self) -> str:
        """What this machine said, in words (machine-dependent: show it in a cell nbval ignores). No verdict when
        a width's rounds disagreed (:attr:`noisy`); with one width measured, no trend."""
        if not self.points:
            return "nothing was measured"
        if self.noisy:
            return (f"no verdict: the rounds disagreed by more than {self.noise_threshold:.0%} at width(s) "
                    f"{', '.join(str(p.width) for p in self.noisy)} — the machine was busy; rerun.")
        start = self.pays_off_from()
        rule = f"> {CLEAR_DIFFERENCE:.2f}× the fp32 speed in every round"
        if start is None:
            text = (f"{self.mode} did not pay off ({rule}) at the largest width measured here "
                    f"({self.points[-1].width}); its best: {max(p.speedup for p in self.points):.2f}× the fp32 speed.")
        elif start == self.points[0].width:
            text = f"{self.mode} paid off ({rule}) at every width measured here, from {start}."
        else:
            text = f"{self.mode} paid off ({rule}) from width {start} up; below it, not."
        if len(self.points) == 1:
            text += " Only one width was measured (the sweep stopped early): too few to see where it starts to pay off."
        return text


def _sweep_step(width: int, depth: int, batch: int, device: torch.device, mode: str, seed: int):
    model, x, target, optimizer, scaler = mlp_problem(width, depth, batch, device, mode, seed)
    return train_step_fn(model, optimizer, scaler, x, target, mode, device.type)


MAX_SWEEP_COUNT = 1000  # rounds, repeats and warmup steps of bf16_sweep


def bf16_sweep(widths: Sequence[int] = (64, 128, 256, 512, 1024, 2048), *, depth: int = 4, batch: int = 256,
               device: torch.device | str = "cpu", mode: str = "bf16", rounds: int = 3, repeats: int = 3,
               warmup: int = 1, budget_seconds: float = 10.0, noise_threshold: float = 0.25,
               seed: int = 0) -> Bf16Sweep:
    """Where does autocast pay off on this machine? Time an FP32 and an AMP training step at each width.

    For each width (increasing), ``rounds`` rounds each time the FP32 step and the ``mode`` step
    (:func:`time_fn`: ``warmup`` untimed calls, the median of ``repeats`` timed ones), alternating which
    runs first. The ratio is reported per round, so a reader sees the spread; a point whose rounds
    disagree by more than ``noise_threshold`` (relative) is flagged as noise.

    Slow machines: before a width, its cost is estimated from the previous width's (scaled by the
    FLOPs, an over-estimate while steps are overhead-bound); if it would exceed what is left of
    ``budget_seconds``, the sweep stops and ``stopped`` says so. The first width always runs.
    """
    if isinstance(widths, (str, bytes)) or not isinstance(widths, Sequence) or not widths:
        raise TypeError(f"widths must be a non-empty list of ints (got {widths!r})")
    widths = [as_int("width", w, minimum=1) for w in widths]
    if widths != sorted(set(widths)):
        raise ValueError(f"widths must be distinct and increasing (got {widths})")
    depth = as_int("depth", depth, minimum=1)
    batch = as_int("batch", batch, minimum=1)
    device = _as_device(device)
    if mode not in ("fp16", "bf16"):
        raise ValueError(f"mode must be 'bf16' or 'fp16' (got {mode!r})")
    reason = mode_unavailable_reason(mode, device)
    if reason:
        raise ValueError(f"mode {mode!r} is not available on {device}: {reason}")
    for width in widths:
        _refuse_huge_step(width, depth, batch, device)
    rounds = as_int("rounds", rounds, minimum=1)
    repeats = as_int("repeats", repeats, minimum=1)
    warmup = as_int("warmup", warmup, minimum=0)
    for name, value in (("rounds", rounds), ("repeats", repeats), ("warmup", warmup)):
        if value > MAX_SWEEP_COUNT:
            raise ValueError(f"{name} must be at most {MAX_SWEEP_COUNT} (got {value:,}): the first width always runs "
                             "all its rounds, whatever budget_seconds says, and would not finish in reasonable time")
    budget = as_positive("budget_seconds", budget_seconds)
    threshold = as_positive("noise_threshold", noise_threshold)
    seed = as_int("seed", seed, minimum=0)
    start = time.perf_counter()
    points: list[SweepPoint] = []
    stopped = None
    last_cost = last_flops = None
    for width in widths:
        flops = mlp_step_flops(width, depth, batch)
        if last_cost is not None:
            estimate = last_cost * flops / last_flops
            left = budget - (time.perf_counter() - start)
            if estimate > left:
                stopped = (f"stopped before width {width}: it would take about {format_time(estimate)} here "
                           f"(budget {format_time(budget)})")
                break
        began = time.perf_counter()
        steps = {m: _sweep_step(width, depth, batch, device, m, seed) for m in ("fp32", mode)}
        times: dict[str, list[float]] = {"fp32": [], mode: []}
        for r in range(rounds):
            order = ("fp32", mode) if r % 2 == 0 else (mode, "fp32")
            for m in order:
                times[m].append(time_fn(steps[m], warmup=warmup if r == 0 else 0, repeats=repeats,
                                        device=device).median)
        points.append(SweepPoint(width, depth, batch, tuple(times["fp32"]), tuple(times[mode])))
        last_cost, last_flops = time.perf_counter() - began, flops
    return Bf16Sweep(mode, str(device), tuple(points), rounds, threshold, stopped)


@dataclass(frozen=True)
class ProductComparison:
    """Matrix products timed in interleaved rounds (see :func:`compare_products`)."""

    labels: tuple[str, ...]
    results: dict[str, MatmulResult]  # the median round of each product
    round_seconds: dict[str, tuple[float, ...]]  # each product's median time per round
    rounds: int
    noise_threshold: float = 0.25

    def ratios(self, label: str, baseline: str) -> tuple[float, ...]:
        """Throughput of ``label`` over ``baseline``, per round (each round's two medians)."""
        a, b = self.results[label], self.results[baseline]
        return tuple((a.flops / ta) / (b.flops / tb) for ta, tb in zip(self.round_seconds[label],
                                                                         self.round_seconds[baseline], strict=True))

    def achieved(self, label: str) -> float:
        """FLOP/s at the median of the product's round times (the statistic :meth:`ratio` compares)."""
        return achieved_flops(self.results[label].flops, statistics.median(self.round_seconds[label]))

    def ratio(self, label: str, baseline: str) -> float:
        """``achieved(label) / achieved(baseline)``: the two FLOP/s that :meth:`line` prints, divided."""
        return self.achieved(label) / self.achieved(baseline)

    def noisy(self, label: str, baseline: str) -> bool:
        """Whether the rounds' ratios disagree by more than ``noise_threshold`` (a busy machine: rerun)."""
        rounds = self.ratios(label, baseline)
        return max(rounds) / min(rounds) - 1 > self.noise_threshold

    def verdict(self, label: str, baseline: str) -> str:
        """"faster", "slower" or "no clear difference" (beyond :data:`CLEAR_DIFFERENCE` and in every round), or,
        when the rounds disagree by more than ``noise_threshold``, no verdict (:func:`judge`)."""
        return judge(self.ratio(label, baseline), self.ratios(label, baseline), self.noisy(label, baseline),
                     self.noise_threshold)

    def line(self, label: str, baseline: str) -> str:
        rounds = self.ratios(label, baseline)
        return (f"{label}: {format_flops(self.achieved(label))}, {self.ratio(label, baseline):.2f}× "
                f"{baseline}'s throughput (rounds {min(rounds):.2f}–{max(rounds):.2f})"
                + ("  <- noisy: rerun" if self.noisy(label, baseline) else ""))


def compare_products(cases: dict[str, tuple[int, int, int, str]], *, device: torch.device | str = "cpu",
                     rounds: int = 4, repeats: int = 3, warmup: int = 1, noise_threshold: float = 0.25,
                     seed: int = 0) -> ProductComparison:
    """Time several ``(m, k, n, mode)`` products in turn, in ``rounds`` rounds, every other round in reverse
    order (timing rule 5, as :func:`compare_precisions` does for steps), so that a drift of the machine's
    speed reaches every product alike. Each round's time is the median of ``repeats`` calls.

    Example:
        >>> c = compare_products({"a": (16, 16, 16, "fp32"), "b": (15, 15, 15, "fp32")}, rounds=2, repeats=1)
        >>> len(c.ratios("b", "a")), c.verdict("a", "a")
        (2, 'no clear difference')
    """
    if not isinstance(cases, dict) or not cases:
        raise ValueError("cases must be a non-empty dict of label -> (m, k, n, mode)")
    rounds = as_int("rounds", rounds, minimum=1)
    repeats = as_int("repeats", repeats, minimum=1)
    noise_threshold = as_positive("noise_threshold", noise_threshold)
    if rounds * repeats * len(cases) > MAX_TIMED_STEPS:
        raise ValueError(f"rounds × repeats × cases must be at most {MAX_TIMED_STEPS:,}")
    labels = tuple(cases)
    per_round: dict[str, list[MatmulResult]] = {label: [] for label in labels}
    for number in range(rounds):
        for label in (labels if number % 2 == 0 else labels[::-1]):
            m, k, n, mode = cases[label]
            per_round[label].append(matmul_throughput(m, k, n, mode=mode, device=device, warmup=warmup,
                                                      repeats=repeats, seed=seed))
    results = {label: sorted(runs, key=lambda r: r.timing.median)[len(runs) // 2]
               for label, runs in per_round.items()}
    return ProductComparison(labels, results, {label: tuple(r.timing.median for r in runs)
                                               for label, runs in per_round.items()}, rounds, noise_threshold)
