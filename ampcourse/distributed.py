"""Lesson 08: DDP + AMP under ``torchrun`` for real — the launcher, the shared recipe and the single-process reference.

The lesson launches real processes: ``python -m ampcourse.torchrun_local --nproc-per-node 2 -m ampcourse.ddp_train``
(the venv's ``torchrun`` with its rendezvous store on 127.0.0.1 only: :mod:`ampcourse.torchrun_local`), gloo on the
CPU, NCCL when there is one GPU per rank. This module holds

* :class:`RunConfig` — everything a run depends on (model, data, global batch, AMP dtype, scaler settings, which
  rank gets an injected inf, which rank fails on purpose). It is written as JSON into the run directory, so the
  DDP ranks and the in-process reference read the *same* numbers.
* :func:`make_model`, :func:`micro_batch` — a tiny seeded MLP (8 → 16 → 1, 161 parameters: float16 matmuls are
  ~100× slower than float32 on a CPU, so the model stays tiny) and deterministic data. Rank ``r`` gets rows
  ``[r·m, (r+1)·m)`` of each global micro-batch of ``world_size · m`` rows.
* :func:`train_windows` — the recipe both paths run: per window of ``accum_steps`` micro-batches, ``no_sync()``
  for all but the last micro-batch (when the model has it), ``loss / len(window)``, ``scaler.scale(loss).backward()``,
  ``unscale_``, ``clip_grad_norm_``, ``scaler.step``, ``scaler.update``.
* :func:`train_single_process` — the reference: one process, the whole global micro-batch at once.
* :func:`launch` — runs torchrun on the loopback interface only, with a timeout (the whole process tree is killed),
  torchrun's noisy output captured to a file, and the per-rank JSON-lines logs parsed into a :class:`RunResult`.
  A failing rank raises :class:`LaunchFailed` (``rank 1 failed: ValueError: ...`` plus its last lines), a hang
  raises :class:`LaunchTimeout`.
* :func:`compare_params` — max |difference| between two flat parameter vectors, with a tolerance.

Each rank writes ``rank{r}.jsonl`` in the run directory: one JSON object per line with an ``event`` field
(``start``, ``window``, ``no_sync_off``, ``desync``, ``final``, ``fsdp_*``, ``step``, ``error``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from . import torchrun_local
from .scaler_run import step_was_skipped
from .validate import as_device, as_int, as_positive

__all__ = [
    "DTYPES", "LaunchFailed", "LaunchTimeout", "ParamComparison", "RunConfig", "RunResult", "SingleResult",
    "compare_params", "flat_params", "free_port", "fsdp_accumulation_dtypes", "launch", "make_model", "micro_batch",
    "param_hash", "param_tolerance",
    "pick_backend", "read_rank_logs", "train_single_process", "train_windows", "window_batches",
]

ROOT = Path(__file__).resolve().parent.parent
DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}
MODES = ("ddp", "fsdp", "user")
N_INPUTS, N_HIDDEN = 8, 16


# ------------------------------------------------------------------------------------------------- config
@dataclass(frozen=True)
class RunConfig:
    """Everything a lesson-08 run depends on; the DDP ranks and the single-process reference share it.

    Attributes:
        world_size: number of ranks (processes) of the DDP run; the reference uses the same global batch.
        windows: optimizer steps (one per window of ``accum_steps`` micro-batches).
        accum_steps: micro-batches per window (gradient accumulation).
        micro_batch_size: rows per micro-batch *per rank*; the global micro-batch has ``world_size`` times more.
        lr, max_norm: SGD learning rate and the ``clip_grad_norm_`` threshold.
        init_scale, growth_interval: the ``GradScaler`` settings.
        dtype: the autocast dtype, ``"float16"``, ``"bfloat16"`` or ``"float32"`` (autocast off).
        device: ``"cpu"`` or ``"cuda"``.
        seed: seeds the model's initial weights and the data.
        inf_window, inf_rank: put an inf into rank ``inf_rank``'s rows of the last micro-batch of window
            ``inf_window`` (``None``: no inf). The reference gets the same inf in the same rows.
        fail_rank: this rank raises ``ValueError`` at start-up (the failure demo); ``None``: nobody fails.
        mode: ``"ddp"`` (the lesson's run), ``"fsdp"`` (the FSDP2 demo) or ``"user"`` (an exercise check).
        fsdp_after: in mode ``"ddp"``, run the FSDP2 demo too, in the same processes (one launch instead of two).
        fsdp_dtype: the FSDP2 demo's ``MixedPrecisionPolicy(param_dtype=...)``.
        user_fn: the name of the learner's function (mode ``"user"``; its source is ``user_fn.py``).
        collective_timeout: seconds a collective may wait before torch gives up (``init_process_group``).
    """

    world_size: int = 2
    windows: int = 6
    accum_steps: int = 2
    micro_batch_size: int = 4
    lr: float = 0.2
    max_norm: float = 1.0
    init_scale: float = 2.0**12
    growth_interval: int = 2
    dtype: str = "float16"
    device: str = "cpu"
    seed: int = 0
    inf_window: int | None = None
    inf_rank: int = 1
    fail_rank: int | None = None
    mode: str = "ddp"
    fsdp_after: bool = False
    fsdp_dtype: str = "bfloat16"
    user_fn: str = "train"
    collective_timeout: float = 60.0

    def __post_init__(self) -> None:
        as_int("world_size", self.world_size, minimum=1)
        as_int("windows", self.windows, minimum=1)
        as_int("accum_steps", self.accum_steps, minimum=1)
        as_int("micro_batch_size", self.micro_batch_size, minimum=1)
        as_positive("lr", self.lr)
        as_positive("max_norm", self.max_norm)
        as_positive("init_scale", self.init_scale)
        as_int("growth_interval", self.growth_interval, minimum=1)
        as_int("seed", self.seed, minimum=0)
        as_positive("collective_timeout", self.collective_timeout)
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {list(DTYPES)} (got {self.dtype!r})")
        if self.device not in ("cpu", "cuda"):
            raise ValueError(f"device must be 'cpu' or 'cuda' (got {self.device!r})")
        if self.fsdp_dtype not in DTYPES:
            raise ValueError(f"fsdp_dtype must be one of {list(DTYPES)} (got {self.fsdp_dtype!r})")
        if not isinstance(self.fsdp_after, bool):
            raise TypeError(f"fsdp_after must be a bool (got {self.fsdp_after!r})")
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {list(MODES)} (got {self.mode!r})")
        if self.inf_window is not None and not 0 <= as_int("inf_window", self.inf_window, minimum=0) < self.windows:
            raise ValueError(f"inf_window must be None or in [0, {self.windows}) (got {self.inf_window!r})")
        if not 0 <= as_int("inf_rank", self.inf_rank, minimum=0) < self.world_size:
            raise ValueError(f"inf_rank must be in [0, {self.world_size}) (got {self.inf_rank!r})")
        if self.fail_rank is not None:
            as_int("fail_rank", self.fail_rank, minimum=0)
        if not isinstance(self.user_fn, str) or not self.user_fn.isidentifier():
            raise ValueError(f"user_fn must be a Python identifier (got {self.user_fn!r})")

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]

    @property
    def n_micro(self) -> int:
        """Micro-batches in the whole run (``windows × accum_steps``)."""
        return self.windows * self.accum_steps

    @property
    def global_batch(self) -> int:
        """Rows per optimizer step, over all ranks: ``world_size × accum_steps × micro_batch_size``."""
        return self.world_size * self.accum_steps * self.micro_batch_size

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=1)

    @classmethod
    def from_json(cls, text: str) -> RunConfig:
        return cls(**json.loads(text))

    def write(self, run_dir: Path) -> Path:
        path = Path(run_dir) / "config.json"
        path.write_text(self.to_json())
        return path


# -------------------------------------------------------------------------------------------- model, data
def _as_config(config: Any) -> RunConfig:
    if not isinstance(config, RunConfig):
        raise TypeError(f"config must be a RunConfig (got {type(config).__name__})")
    return config


def _as_model(model: Any) -> nn.Module:
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module (got {type(model).__name__})")
    return model


def make_model(config: RunConfig) -> nn.Module:
    """The tiny MLP (8 → 16 → 1, tanh; 161 parameters), identical on every call and every rank, on the CPU."""
    _as_config(config)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)
        return nn.Sequential(nn.Linear(N_INPUTS, N_HIDDEN), nn.Tanh(), nn.Linear(N_HIDDEN, 1))


def micro_batch(config: RunConfig, index: int, rank: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Micro-batch ``index`` on the CPU: the global one (``rank=None``, ``world_size × m`` rows) or one rank's rows.

    The data is a noisy one-neuron teacher, generated from ``config.seed`` and ``index`` alone. With
    ``config.inf_window`` set, the last micro-batch of that window holds an inf in rank ``inf_rank``'s first row.
    """
    _as_config(config)
    index = as_int("index", index, minimum=0)
    m, world = config.micro_batch_size, config.world_size
    generator = torch.Generator().manual_seed(config.seed * 100_003 + index + 1)
    teacher = torch.randn(N_INPUTS, 1, generator=torch.Generator().manual_seed(config.seed)) / math.sqrt(N_INPUTS)
    x = torch.randn(world * m, N_INPUTS, generator=generator)
    y = torch.tanh(3 * x @ teacher) + 0.1 * torch.randn(world * m, 1, generator=generator)
    if config.inf_window is not None and index == config.inf_window * config.accum_steps + config.accum_steps - 1:
        x[config.inf_rank * m, 0] = math.inf
    if rank is None:
        return x, y
    if not 0 <= as_int("rank", rank, minimum=0) < world:
        raise ValueError(f"rank must be in [0, {world}) (got {rank})")
    rows = slice(rank * m, (rank + 1) * m)
    return x[rows], y[rows]


def window_batches(config: RunConfig, rank: int | None, device: torch.device | str = "cpu") -> list:
    """All ``config.n_micro`` micro-batches of one rank (or the global ones), moved to ``device``."""
    _as_config(config)
    device = as_device("device", device)
    return [tuple(t.to(device) for t in micro_batch(config, i, rank)) for i in range(config.n_micro)]


def flat_params(model: nn.Module) -> torch.Tensor:
    """All parameters as one flat float64 CPU vector (a copy)."""
    _as_model(model)
    return torch.cat([p.detach().reshape(-1).to("cpu", torch.float64) for p in model.parameters()])


def param_hash(model: nn.Module) -> str:
    """The first 12 hex digits of the SHA-256 of the parameters' bytes: equal hashes = equal bits."""
    _as_model(model)
    digest = hashlib.sha256()
    for p in model.parameters():
        digest.update(p.detach().to("cpu").contiguous().numpy().tobytes())
    return digest.hexdigest()[:12]


# ------------------------------------------------------------------------------------------------- recipe
def train_windows(model: nn.Module, optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler,
                  batches: Sequence, accum_steps: int, max_norm: float, *, dtype: torch.dtype,
                  on_window: Callable[[int, dict[str, Any]], None] | None = None) -> None:
    """The DDP + AMP recipe, one optimizer step per window of ``accum_steps`` micro-batches.

    For every micro-batch but the last of a window, forward *and* backward run inside ``model.no_sync()`` (when
    the model has it, i.e. it is a ``DistributedDataParallel``): the gradients only accumulate locally, and the
    all-reduce happens once, in the last micro-batch's backward. Each loss is divided by the window's length,
    so the step sees the window's mean gradient; then ``unscale_`` → ``clip_grad_norm_`` → ``step`` →
    ``update``. ``on_window(k, info)`` gets the window's scale, mean local loss, clip norm and whether the step
    was skipped.
    """
    _as_model(model)
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"optimizer must be a torch.optim.Optimizer (got {type(optimizer).__name__})")
    if not isinstance(scaler, torch.amp.GradScaler):
        raise TypeError(f"scaler must be a torch.amp.GradScaler (got {type(scaler).__name__})")
    if isinstance(batches, (str, bytes)) or not isinstance(batches, Sequence):
        raise TypeError(f"batches must be a list of (x, y) tensor pairs (got {type(batches).__name__})")
    if dtype not in DTYPES.values():
        raise ValueError(f"dtype must be one of {list(DTYPES.values())} (got {dtype!r})")
    if on_window is not None and not callable(on_window):
        raise TypeError(f"on_window must be None or a function (got {on_window!r})")
    accum_steps = as_int("accum_steps", accum_steps, minimum=1)
    max_norm = as_positive("max_norm", max_norm)
    parameters = [p for p in model.parameters()]
    for k, start in enumerate(range(0, len(batches), accum_steps)):
        window = batches[start:start + accum_steps]
        optimizer.zero_grad(set_to_none=True)
        scale = scaler.get_scale()
        losses = []
        for i, (x, y) in enumerate(window):
            last = i == len(window) - 1
            sync = contextlib.nullcontext() if last or not hasattr(model, "no_sync") else model.no_sync()
            with sync:
                with torch.autocast(x.device.type, dtype=dtype, enabled=dtype != torch.float32):
                    loss = F.mse_loss(model(x).float(), y) / len(window)
                scaler.scale(loss).backward()
            losses.append(loss.item())
        scaler.unscale_(optimizer)
        norm = float(torch.nn.utils.clip_grad_norm_(parameters, max_norm))
        scaler.step(optimizer)
        scaler.update()
        if on_window is not None:
            skipped = step_was_skipped(scale, scaler.get_scale()) if scaler.is_enabled() else False
            on_window(k, {"window": k, "scale": scale, "loss": sum(losses), "grad_norm": norm,
                          "skipped": skipped, "scale_after": scaler.get_scale()})


def make_scaler(config: RunConfig, enabled: bool = True) -> torch.amp.GradScaler:
    """The run's ``GradScaler`` (one per process)."""
    return torch.amp.GradScaler(config.device, init_scale=config.init_scale,
                                growth_interval=config.growth_interval, enabled=enabled)


@dataclass(frozen=True)
class SingleResult:
    """The single-process reference (see :func:`train_single_process`)."""

    params: torch.Tensor = field(repr=False)
    records: tuple[dict[str, Any], ...]
    param_hash: str


def train_single_process(config: RunConfig) -> SingleResult:
    """The same run in this process: one model, the *global* micro-batches, the same recipe and scaler settings.

    Example:
        >>> ref = train_single_process(RunConfig(windows=2, dtype="float32"))
        >>> len(ref.records), ref.params.shape
        (2, torch.Size([161]))
    """
    if not isinstance(config, RunConfig):
        raise TypeError(f"config must be a RunConfig (got {type(config).__name__})")
    device = torch.device(config.device)
    model = make_model(config).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=config.lr)
    scaler = make_scaler(config)
    records: list[dict[str, Any]] = []
    train_windows(model, optimizer, scaler, window_batches(config, None, device), config.accum_steps,
                  config.max_norm, dtype=config.torch_dtype, on_window=lambda k, info: records.append(info))
    return SingleResult(flat_params(model), tuple(records), param_hash(model))


@dataclass(frozen=True)
class ParamComparison:
    """``max |a − b|`` against a tolerance (see :func:`compare_params`)."""

    max_diff: float
    tolerance: float
    n: int
    bit_identical: bool

    @property
    def ok(self) -> bool:
        return self.max_diff <= self.tolerance

    def __str__(self) -> str:
        """The verdict against the tolerance. The exact ``max_diff`` is rounding noise whose digits depend on the
        CPU's or GPU's kernels (AVX2 and AVX-512 sum in different orders), so it is not part of this text."""
        sign = "≤" if self.ok else ">"
        return f"max |diff| {sign} {self.tolerance:.2e} (the tolerance) over {self.n} parameters"


def param_tolerance(config: RunConfig) -> float:
    """How far the DDP run's parameters may drift from the single-process run's: ``windows × lr × max_norm × eps``.

    Each step moves every parameter by at most ``lr × max_norm`` (the clipped gradient's norm bounds each of its
    elements); the two runs round that move differently by about one unit in the last place of the autocast dtype
    (``eps``): the all-reduce averages two half-batch means where the reference takes one mean, and under float16
    each rank rounds its own half-batch's activations and gradients. The drifts add up over the steps.

    A heuristic, not a bound: it assumes plain SGD whose clipping fires (so ``max_norm`` bounds the move) and
    ignores forward-pass rounding that compounds through the layers. It is loose — lesson 08 measures a drift
    about 30 times smaller — so it catches a broken recipe (a different step, a missed skip), not subtle
    rounding differences.

    Example:
        >>> f"{param_tolerance(RunConfig(windows=6, lr=0.2, max_norm=1.0, dtype='float16')):.2e}"
        '1.17e-03'
    """
    if not isinstance(config, RunConfig):
        raise TypeError(f"config must be a RunConfig (got {type(config).__name__})")
    eps = torch.finfo(config.torch_dtype).eps
    return config.windows * config.lr * config.max_norm * eps


def compare_params(a: torch.Tensor, b: torch.Tensor, tolerance: float) -> ParamComparison:
    """Compare two flat parameter vectors (e.g. the DDP rank 0 result and the single-process reference)."""
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        raise TypeError("a and b must be tensors (flat parameter vectors)")
    if a.shape != b.shape:
        raise ValueError(f"a and b must have the same shape (got {tuple(a.shape)} and {tuple(b.shape)})")
    tolerance = as_positive("tolerance", tolerance)
    a64, b64 = a.detach().double().cpu(), b.detach().double().cpu()
    return ParamComparison(float((a64 - b64).abs().max()) if a.numel() else 0.0, tolerance, a.numel(),
                           torch.equal(a64, b64))


# ------------------------------------------------------------------------------------------------ launcher
def free_port() -> int:
    """A TCP port that is free right now: bind a socket to port 0 and let the OS choose."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def pick_backend(device_type: str, nproc: int) -> tuple[str, str]:
    """``(backend, why)``: NCCL only with one CUDA GPU per rank, else gloo.

    NCCL refuses two ranks on one GPU, so a 1-GPU machine runs its 2 ranks with gloo (which can all-reduce CUDA
    tensors too, more slowly, through the host).
    """
    nproc = as_int("nproc", nproc, minimum=1)
    if device_type == "cuda":
        count = torch.cuda.device_count()
        if count >= nproc and torch.distributed.is_nccl_available():
            return "nccl", f"{count} CUDA GPUs for {nproc} ranks: NCCL, one GPU per rank"
        return "gloo", (f"{count} CUDA GPU(s) for {nproc} ranks: NCCL needs one GPU per rank, so gloo "
                        "(the ranks share the GPU)")
    if device_type != "cpu":
        raise ValueError(f"device_type must be 'cpu' or 'cuda' (got {device_type!r})")
    return "gloo", "CPU tensors: gloo (NCCL is for CUDA GPUs only)"


class LaunchFailed(RuntimeError):
    """torchrun exited with an error. ``result`` holds what the ranks logged; ``rank`` is the first failing rank."""

    def __init__(self, message: str, result: RunResult | None = None, rank: int | None = None,
                 error_type: str | None = None) -> None:
        super().__init__(message)
        self.result = result
        self.rank = rank
        self.error_type = error_type


class LaunchTimeout(LaunchFailed):
    """torchrun did not finish within the timeout; its whole process tree was killed."""


@dataclass(frozen=True)
class RunResult:
    """What a torchrun launch left behind (see :func:`launch`).

    Attributes:
        returncode: torchrun's exit status.
        logs: per rank, the list of JSON records it wrote to ``rank{r}.jsonl`` (empty if it wrote none).
        run_dir: where the logs, the config and ``torchrun.log`` (torchrun's own output) are.
        seconds: wall time of the launch.
        command: the command line that ran.
    """

    returncode: int
    logs: dict[int, list[dict[str, Any]]]
    run_dir: Path
    seconds: float
    command: tuple[str, ...] = field(repr=False)

    def events(self, rank: int, event: str) -> list[dict[str, Any]]:
        """Rank ``rank``'s records whose ``event`` is ``event``."""
        return [r for r in self.logs.get(rank, []) if r.get("event") == event]

    def one(self, rank: int, event: str) -> dict[str, Any]:
        """The single ``event`` record of ``rank`` (``KeyError`` if it is missing)."""
        found = self.events(rank, event)
        if not found:
            raise KeyError(f"rank {rank} logged no {event!r} record")
        return found[-1]

    def errors(self) -> dict[int, dict[str, Any]]:
        """The ``error`` record of each rank that logged one."""
        return {rank: found[-1] for rank in sorted(self.logs) if (found := self.events(rank, "error"))}

    def torchrun_tail(self, lines: int = 15) -> str:
        """The last lines of torchrun's own output."""
        path = self.run_dir / "torchrun.log"
        text = path.read_text(errors="replace") if path.exists() else ""
        return _short_paths("\n".join(text.strip().splitlines()[-lines:]))


def _short_paths(text: str) -> str:
    """Paths inside the repository shown relative to it (``ampcourse/ddp_train.py``), not as machine paths."""
    return text.replace(f"{ROOT}{os.sep}", "")


def read_rank_logs(run_dir: Path) -> dict[int, list[dict[str, Any]]]:
    """Parse every ``rank{r}.jsonl`` in ``run_dir`` (a torn last line, from a killed rank, is ignored)."""
    logs: dict[int, list[dict[str, Any]]] = {}
    for path in sorted(Path(run_dir).glob("rank*.jsonl")):
        rank = int(path.stem.removeprefix("rank"))
        records = []
        for line in path.read_text(errors="replace").splitlines():
            with contextlib.suppress(json.JSONDecodeError):
                records.append(json.loads(line))
        logs[rank] = records
    return logs


def _descendants(pid: int) -> list[int]:
    """The process ids below ``pid`` (Linux ``/proc``; empty elsewhere)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _kill_tree(proc: subprocess.Popen, grace: float = 3.0) -> int:
    """SIGTERM torchrun's process group (it stops its workers), then SIGKILL whatever is left of the tree.

    torchrun starts each worker in a session of its own, so killing torchrun's group alone could orphan them: the
    workers are collected from ``/proc`` first and killed by their own groups.
    """
    tree = _descendants(proc.pid)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        pass
    for pid in [proc.pid, *tree]:
        for kill in (os.killpg, os.kill):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                kill(pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace)
    return len(tree) + 1


_PEER_FAILURE_SIGNS = ("closed by peer", "reset by peer", "remote worker crashing", "Broken pipe")


def _failure_message(result: RunResult, lines: int) -> tuple[str, int | None, str | None]:
    errors = result.errors()
    # The root cause first: not a termination by torchrun, not a peer's connection dropping because another rank
    # failed (gloo: "Connection closed by peer ... typically caused by a remote worker crashing"); then the earliest.
    def secondary(error: dict[str, Any]) -> tuple[bool, bool, float]:
        message = str(error.get("message", ""))
        return (error.get("type") in ("SignalException", "KeyboardInterrupt"),
                any(sign in message for sign in _PEER_FAILURE_SIGNS), float(error.get("time", 0.0)))

    ordered = sorted(errors.items(), key=lambda item: (*secondary(item[1]), item[0]))
    if ordered:
        rank, error = ordered[0]
        tail = _short_paths("\n".join(str(error.get("traceback", "")).strip().splitlines()[-lines:]))
        message = f"rank {rank} failed: {error.get('type')}: {error.get('message')}"
        others = [r for r, _ in ordered[1:]]
        if others:
            message += f" (rank{'s' if len(others) > 1 else ''} {', '.join(map(str, others))} failed too)"
        return f"{message}\n--- last lines of rank {rank}'s traceback ---\n{tail}", rank, error.get("type")
    return (f"torchrun exited with status {result.returncode} and no rank logged an error; the last lines of its "
            f"output ({result.run_dir / 'torchrun.log'}):\n{result.torchrun_tail(lines)}", None, None)


def _finished_then_crashed_in_teardown(result: RunResult, nproc: int) -> bool:
    """Did every rank log ``done`` (written after the final barrier) with no ``error`` anywhere?"""
    return not result.errors() and all(result.events(rank, "done") for rank in range(nproc))


#: torchrun's log folder, inside the run folder (``--log-dir``): without it torchelastic makes
#: ``$TMPDIR/torchelastic_<random>/`` on every launch and never removes it. Removed after a run that succeeded.
ELASTIC_LOG_DIR = "torchelastic"


def launch(target: str | Path, *, nproc: int = 2, args: Sequence[str] = (), run_dir: str | Path,
           timeout: float = 120.0, env: dict[str, str] | None = None, lines: int = 8) -> RunResult:
    """Run ``target`` under torchrun with ``nproc`` processes; return the parsed per-rank logs.

    ``target`` is a module name (``"ampcourse.ddp_train"``, run with ``-m``) or the path of a ``.py`` script. The
    command is ``sys.executable -m ampcourse.torchrun_local --nproc-per-node N --nnodes 1 --rdzv-backend
    ampcourse-local --rdzv-endpoint 127.0.0.1:0 --local-addr 127.0.0.1 ...``: this interpreter's torchrun, its
    rendezvous store listening on 127.0.0.1 only, on a port the system picks (:mod:`ampcourse.torchrun_local`:
    torch's own store listens on every interface), no restarts. Nothing the run opens accepts connections from
    another machine.
    torchrun's own output (and the workers' stdout/stderr) goes to ``run_dir/torchrun.log``, not to the screen;
    torchelastic's log folder is ``run_dir/torchelastic`` (:data:`ELASTIC_LOG_DIR`), removed when the run succeeds.

    Raises:
        LaunchTimeout: the launch took longer than ``timeout`` seconds; the whole process tree was killed.
        LaunchFailed: torchrun exited with an error; the message names the first failing rank, its exception and
            the last ``lines`` lines of its traceback (or of torchrun's output when no rank logged one).
    """
    if not isinstance(target, (str, Path)) or not str(target):
        raise TypeError(f"target must be a module name or a script path (got {target!r})")
    nproc = as_int("nproc", nproc, minimum=1)
    timeout = as_positive("timeout", timeout)
    if isinstance(args, str) or not all(isinstance(a, str) for a in args):
        raise TypeError("args must be a sequence of str")
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    for old in run_dir.glob("rank*.jsonl"):
        old.unlink()
    target = str(target)
    is_script = target.endswith(".py") or os.sep in target
    command = (sys.executable, "-m", "ampcourse.torchrun_local", "--nproc-per-node", str(nproc), "--nnodes", "1",
               "--rdzv-backend", torchrun_local.BACKEND, "--rdzv-endpoint", f"{torchrun_local.LOOPBACK}:0",
               "--local-addr", torchrun_local.LOOPBACK, "--max-restarts", "0",
               "--log-dir", str(run_dir / ELASTIC_LOG_DIR),
               *(() if is_script else ("-m",)), target, *args)
    environment = dict(os.environ if env is None else env)
    environment.setdefault("OMP_NUM_THREADS", "1")  # what torchrun would set, without its banner
    # Local only: the rendezvous store listens on 127.0.0.1 (torchrun_local), gloo's pairs on the loopback interface.
    if sys.platform.startswith("linux"):
        environment.setdefault("GLOO_SOCKET_IFNAME", "lo")
    environment["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), environment.get("PYTHONPATH", "")) if p)
    environment["PYTHONUNBUFFERED"] = "1"
    start = time.perf_counter()
    with open(run_dir / "torchrun.log", "wb") as output:
        proc = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                cwd=ROOT, env=environment, start_new_session=True)
        try:
            returncode = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            killed = _kill_tree(proc)
            result = RunResult(proc.returncode if proc.returncode is not None else -9, read_rank_logs(run_dir),
                               run_dir, time.perf_counter() - start, command)
            raise LaunchTimeout(
                f"torchrun did not finish within {timeout:g} s: killed its process tree ({killed} processes). "
                f"A rank is stuck (an endless loop, or ranks waiting for a collective the others never start). "
                f"Last lines of torchrun's output:\n{result.torchrun_tail(lines)}", result) from None
    result = RunResult(returncode, read_rank_logs(run_dir), run_dir, time.perf_counter() - start, command)
    if returncode == 0:  # torchelastic's per-attempt folders (error files only): kept for a failed run
        shutil.rmtree(run_dir / ELASTIC_LOG_DIR, ignore_errors=True)
    if returncode != 0 and _finished_then_crashed_in_teardown(result, nproc):
        # Every rank logged "done" after the closing barrier, and none logged an error: the work is complete and
        # its logs are whole. A gloo rank can still abort (SIGABRT) while tearing its connections down, when its
        # peer closed first; that says nothing about the run, so it is not reported as a failure.
        return result
    if returncode != 0:
        message, rank, error_type = _failure_message(result, lines)
        raise LaunchFailed(message, result, rank, error_type)
    return result


# ------------------------------------------------------------------------------------- FSDP2 accumulation dtype
def fsdp_accumulation_dtypes(param_dtype: torch.dtype = torch.bfloat16,
                             reduce_dtypes: Sequence[torch.dtype | None] = (None, torch.float32),
                             micro_batches: int = 2) -> dict[str, dict[str, torch.dtype]]:
    """In which dtype FSDP2 *accumulates* gradients under ``set_requires_gradient_sync(False)``, per policy.

    For each ``MixedPrecisionPolicy(param_dtype, reduce_dtype)``: a tiny model is ``fully_shard``-ed in a
    one-process gloo group (in-memory store, this process: nothing listens on the network), ``micro_batches``
    backward passes run with gradient sync off, and the unsharded gradient FSDP keeps between them is read
    (FSDP's internal ``FSDPParam``: the public API does not expose it); then one backward with sync on gives
    the sharded gradient the optimizer sees. Returns ``{repr(reduce_dtype): {"accumulated": dtype,
    "sharded grad": dtype}}``. torch's rule (``MixedPrecisionPolicy`` docstring, ``FSDPParam.
    to_accumulated_grad_if_needed``): with ``reduce_dtype=None`` the reduction — and the accumulation — run in
    ``param_dtype``; with ``reduce_dtype`` set, the accumulation runs in ``reduce_dtype``.
    """
    import torch.distributed as dist
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    as_int("micro_batches", micro_batches, minimum=1)
    if not dist.is_initialized():
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    results: dict[str, dict[str, torch.dtype]] = {}
    for reduce_dtype in reduce_dtypes:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
            x = torch.randn(4, 8)
        fully_shard(model, mp_policy=MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=reduce_dtype))
        model.set_requires_gradient_sync(False)
        for _ in range(micro_batches):
            model(x).float().pow(2).mean().backward()
        fsdp_param = model._get_fsdp_state()._fsdp_param_group.fsdp_params[0]
        held = fsdp_param.unsharded_accumulated_grad
        if held is None:
            held = fsdp_param._unsharded_param.grad
        model.set_requires_gradient_sync(True)
        model(x).float().pow(2).mean().backward()
        results[str(reduce_dtype).removeprefix("torch.")] = {
            "accumulated": held.dtype, "sharded grad": next(model.parameters()).grad.dtype}
    return results
