"""Lesson 09 (capstone): a real model on real, bundled data, trained with the whole AMP recipe.

The data is the UCI *Optical Recognition of Handwritten Digits* test set as scikit-learn ships it
(1797 images of 8×8 pixels with values 0..16, ten classes; see ``ampcourse/data/README.md``). It is
bundled with the package and read with ``gzip`` + ``numpy`` through :mod:`importlib.resources`: no
download, no pandas, no scikit-learn.

The recipe, in :func:`train` (one optimizer step per window of ``accum_steps`` micro-batches, the
window's step in :func:`train_window`):

* autocast in the device's recommended dtype (:func:`ampcourse.device.recommend`: bfloat16 on the CPU
  and on Ampere or newer, float16 + ``GradScaler`` on older GPUs and MPS), or plain FP32;
* gradient accumulation: each micro-batch loss divided by the window's length;
* ``scaler.unscale_`` → ``clip_grad_norm_`` → ``scaler.step`` → ``scaler.update``;
* a warm-up + cosine learning-rate schedule that is stepped only when the optimizer really stepped (a
  skipped step is seen from the outside: the scale went down, :func:`ampcourse.scaler_run.step_was_skipped`);
* evaluation under ``torch.inference_mode()`` and the same autocast;
* checkpoint and resume of everything that decides the next step (model, optimizer, scaler, scheduler,
  step counter, the shuffling generator and the global RNG used by dropout), so that a resumed run
  equals the uninterrupted one bit for bit;
* progress lines every ``log_every`` steps and a summary.

:func:`compare` runs FP32 and AMP from the same seeds and reports accuracy (mean ± std over seeds, and
the paired difference), the median step time and the bytes saved for backward (activations and autocast's
weight copies apart).
"""

from __future__ import annotations

import copy
import fractions
import gzip
import importlib.resources
import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from .bench import ActivationReport, saved_activation_bytes
from .device import recommend
from .scaler_run import step_was_skipped
from .tables import Table
from .validate import as_int, as_positive

if TYPE_CHECKING:  # matplotlib is imported only when a figure is drawn
    from .widgets.base import Png

__all__ = [
    "SIZES", "Comparison", "Digits", "TrainConfig", "TrainResult", "TrainState", "checkpoint_state", "compare",
    "cosine_schedule", "curves_png", "digits_png", "evaluate", "load_checkpoint", "load_digits", "make_model",
    "noise_interval_coverage", "paired_difference", "paired_verdict", "recommended_dtype", "restore_state",
    "save_checkpoint", "split", "train", "train_window",
]

N_PIXELS, N_CLASSES = 64, 10
DATA_FILE = "digits.csv.gz"

#: Model and run sizes: ``small`` fits the 2-core CPU budget; ``large`` is for GPUs, where wide matrix
#: products show what reduced precision buys.
SIZES: dict[str, dict[str, Any]] = {
    "small": {"hidden": (256, 256), "micro_batch": 64, "epochs": 6, "lr": 1e-2},
    "large": {"hidden": (4096, 4096, 4096), "micro_batch": 256, "epochs": 30, "lr": 1e-3},
}
DTYPES = (torch.float32, torch.bfloat16, torch.float16)
# Comparison.verdict: how close AMP must be to FP32 on every seed (a fraction: 0.01 = one percentage point).
# One validation image is 1/359 = 0.28 points, so this allows three images either way.
VERDICT_TOLERANCE = 0.01
#: paired_verdict: a mean per-seed difference is noise when it is at most this many standard errors from 0.
NOISE_STANDARD_ERRORS = 2
#: The rule, in words: lesson 09, exercise 09 Task 3 (its text, hint and check) and quiz 09 read it from here.
VERDICT_RULE = ("pair the runs by seed, d = amp − fp32 per seed; 'within noise' when |mean(d)| ≤ 2 standard errors "
                "of the mean (sample std of d, n − 1, divided by √n), else 'amp better' if mean(d) > 0, "
                "'amp worse' if it is below 0")


# -------------------------------------------------------------------------------------------------- data
@dataclass(frozen=True)
class Digits:
    """The bundled digits: ``images`` (N, 8, 8) uint8 with values 0..16, ``labels`` (N,) int64 in 0..9."""

    images: np.ndarray = field(repr=False)
    labels: np.ndarray = field(repr=False)

    def __len__(self) -> int:
        return len(self.labels)

    def tensors(self, index: np.ndarray | None = None,
                device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
        """Inputs as float32 (N, 64) scaled to [0, 1] and int64 labels, optionally a subset, on ``device``."""
        images, labels = (self.images, self.labels) if index is None else (self.images[index], self.labels[index])
        x = torch.from_numpy(images.reshape(len(labels), N_PIXELS).astype(np.float32) / 16.0)
        return x.to(device), torch.from_numpy(labels.astype(np.int64)).to(device)


def load_digits() -> Digits:
    """Read the bundled ``ampcourse/data/digits.csv.gz`` (1797 rows: 64 pixel values, then the label).

    Example:
        >>> digits = load_digits()
        >>> len(digits), digits.images.shape[1:], int(digits.images.max()), sorted(set(digits.labels.tolist()))[:3]
        (1797, (8, 8), 16, [0, 1, 2])
    """
    resource = importlib.resources.files("ampcourse").joinpath("data").joinpath(DATA_FILE)
    with resource.open("rb") as raw, gzip.open(raw, "rt", encoding="ascii") as text:
        table = np.loadtxt(text, delimiter=",", dtype=np.int64)
    if table.ndim != 2 or table.shape[1] != N_PIXELS + 1:
        raise ValueError(f"{DATA_FILE}: expected rows of {N_PIXELS + 1} values, got shape {table.shape}")
    images = table[:, :N_PIXELS].reshape(-1, 8, 8).astype(np.uint8)
    return Digits(images=images, labels=table[:, N_PIXELS].copy())


MAX_SPLIT = 100_000_000


def split(n: int, val_fraction: float = 0.2, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A deterministic shuffled split of ``range(n)``: ``(train_index, val_index)``, each sorted.

    The same ``seed`` gives the same split on every machine (NumPy's PCG64 generator).

    Example:
        >>> train_index, val_index = split(10, 0.2)
        >>> len(train_index), len(val_index), sorted([*train_index, *val_index]) == list(range(10))
        (8, 2, True)
    """
    n = as_int("n", n, minimum=2)
    if n > MAX_SPLIT:
        raise ValueError(f"n must be at most {MAX_SPLIT:,} (got {n:,}): the split holds a permutation of range(n)")
    val_fraction = as_positive("val_fraction", val_fraction)
    if not val_fraction < 1:
        raise ValueError(f"val_fraction must be between 0 and 1, exclusive (got {val_fraction!r})")
    seed = as_int("seed", seed, minimum=0)
    n_val = min(n - 1, max(1, round(n * val_fraction)))
    order = np.random.default_rng(seed).permutation(n)
    return np.sort(order[n_val:]), np.sort(order[:n_val])


# ------------------------------------------------------------------------------------------------- model
def _check_size(size: Any) -> str:
    if not isinstance(size, str):
        raise TypeError(f"size must be a str, one of {tuple(SIZES)} (got {size!r})")
    if size not in SIZES:
        raise ValueError(f"size must be one of {tuple(SIZES)} (got {size!r})")
    return size


def make_model(size: str = "small", seed: int = 0, dropout: float = 0.1) -> nn.Sequential:
    """An MLP for the 8×8 digits: 64 → hidden layers (GELU, dropout) → 10 logits. Same seed, same weights.

    ``small`` has two hidden layers of 256 (85,002 parameters); ``large`` three of 4096 (about 34
    million), for GPUs. The global RNG is left as it was.

    Example:
        >>> sum(p.numel() for p in make_model("small").parameters())
        85002
    """
    size = _check_size(size)
    seed = as_int("seed", seed, minimum=0)
    if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0 <= dropout < 1:
        raise ValueError(f"dropout must be a number in [0, 1) (got {dropout!r})")
    layers: list[nn.Module] = []
    width = N_PIXELS
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for hidden in SIZES[size]["hidden"]:
            layers += [nn.Linear(width, hidden), nn.GELU(), nn.Dropout(dropout)]
            width = hidden
        layers.append(nn.Linear(width, N_CLASSES))
        return nn.Sequential(*layers)


def recommended_dtype(device: torch.device | str) -> torch.dtype:
    """The dtype :func:`ampcourse.device.recommend` gives for ``device``; float32 (e.g. CUDA 6.1) means AMP off."""
    device = _as_device(device)
    if device.type == "cuda":
        return recommend("cuda", torch.cuda.get_device_capability(device)).dtype
    return recommend(device.type).dtype


# ------------------------------------------------------------------------------------------------ config
def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


@dataclass(frozen=True)
class TrainConfig:
    """Everything that decides a run. ``dtype=torch.float32`` is plain FP32; bfloat16/float16 mean autocast.

    A ``GradScaler`` is used (enabled) exactly when ``dtype`` is float16. ``epochs``, ``micro_batch`` and
    ``lr`` (AdamW's peak learning rate) default to the size's values (:data:`SIZES`). One optimizer step per
    window of ``accum_steps`` micro-batches; each epoch drops the last incomplete micro-batch, so a short
    last *window* can occur.
    """

    size: str = "small"
    dtype: torch.dtype = torch.float32
    epochs: int | None = None
    micro_batch: int | None = None
    accum_steps: int = 2
    lr: float | None = None
    weight_decay: float = 0.01
    warmup_steps: int = 10
    max_norm: float = 1.0
    seed: int = 0
    dropout: float = 0.1
    eval_every: int = 5
    log_every: int = 20
    init_scale: float = 2.0**16
    val_fraction: float = 0.2

    def __post_init__(self) -> None:
        _check_size(self.size)
        if not isinstance(self.dtype, torch.dtype) or self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of torch.float32, torch.bfloat16, torch.float16 "
                             f"(got {self.dtype!r})")
        for name in ("epochs", "micro_batch"):
            if getattr(self, name) is not None:
                as_int(name, getattr(self, name), minimum=1)
        for name in ("accum_steps", "eval_every", "log_every"):
            as_int(name, getattr(self, name), minimum=1)
        as_int("warmup_steps", self.warmup_steps, minimum=0)
        as_int("seed", self.seed, minimum=0)
        if self.lr is not None:
            as_positive("lr", self.lr)
        for name in ("max_norm", "init_scale"):
            as_positive(name, getattr(self, name))
        if isinstance(self.weight_decay, bool) or not isinstance(self.weight_decay, (int, float)) \
                or not 0 <= self.weight_decay < math.inf:
            raise ValueError(f"weight_decay must be a finite number >= 0 (got {self.weight_decay!r})")
        if isinstance(self.dropout, bool) or not isinstance(self.dropout, (int, float)) or not 0 <= self.dropout < 1:
            raise ValueError(f"dropout must be a number in [0, 1) (got {self.dropout!r})")
        if isinstance(self.val_fraction, bool) or not isinstance(self.val_fraction, (int, float)) \
                or not 0 < self.val_fraction < 1:
            raise ValueError(f"val_fraction must be between 0 and 1, exclusive (got {self.val_fraction!r})")

    @property
    def n_epochs(self) -> int:
        return self.epochs if self.epochs is not None else SIZES[self.size]["epochs"]

    @property
    def batch(self) -> int:
        return self.micro_batch if self.micro_batch is not None else SIZES[self.size]["micro_batch"]

    @property
    def peak_lr(self) -> float:
        return self.lr if self.lr is not None else SIZES[self.size]["lr"]

    @property
    def amp(self) -> bool:
        return self.dtype != torch.float32

    @property
    def label(self) -> str:
        """``FP32``, ``AMP bfloat16`` or ``AMP float16 + GradScaler``."""
        if not self.amp:
            return "FP32"
        return f"AMP {_dtype_name(self.dtype)}" + (" + GradScaler" if self.dtype == torch.float16 else "")

    def as_dict(self) -> dict[str, Any]:
        """Plain data (the dtype as its name): what a checkpoint stores to refuse a mismatched resume."""
        return {**asdict(self), "dtype": _dtype_name(self.dtype)}


def _as_config(config: Any) -> TrainConfig:
    if not isinstance(config, TrainConfig):
        raise TypeError(f"config must be a TrainConfig (got {type(config).__name__})")
    return config


def _as_device(device: Any) -> torch.device:
    from .validate import as_device

    return as_device("device", device)


def cosine_schedule(warmup: int, total: int) -> Callable[[int], float]:
    """Linear warm-up over ``warmup`` steps, then cosine from 1 to 0.05 at ``total`` (held there after)."""
    warmup = as_int("warmup", warmup, minimum=0)
    total = as_int("total", total, minimum=1)  # a run shorter than its warm-up just never leaves it
    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = min(1.0, (step - warmup) / max(1, total - warmup))
        return 0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * progress))
    return factor


# ------------------------------------------------------------------------------------------------ a step
def _check_window(model, optimizer, scaler, scheduler, micro_batches, max_norm, dtype) -> None:
    """:func:`train_window`'s arguments, each named in the error when it is not what the step needs."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module (got {type(model).__name__})")
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"optimizer must be a torch.optim.Optimizer (got {type(optimizer).__name__})")
    if not isinstance(scaler, torch.amp.GradScaler):
        raise TypeError(f"scaler must be a torch.amp.GradScaler, enabled or not (got {type(scaler).__name__})")
    if not callable(getattr(scheduler, "step", None)):
        raise TypeError("scheduler must be a learning-rate scheduler with a step() method "
                        f"(got {type(scheduler).__name__})")
    if (isinstance(micro_batches, (str, bytes)) or not isinstance(micro_batches, Sequence) or not micro_batches
            or not all(isinstance(b, (tuple, list)) and len(b) == 2 and all(isinstance(t, torch.Tensor) for t in b)
                       for b in micro_batches)):
        raise ValueError("micro_batches must be a non-empty list of (x, y) tensor pairs: one window, one step")
    as_positive("max_norm", max_norm)
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of torch.float32, torch.bfloat16, torch.float16 (got {dtype!r})")


def train_window(model: nn.Module, optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler,
                 scheduler: torch.optim.lr_scheduler.LRScheduler, micro_batches: Sequence[tuple[torch.Tensor,
                                                                                               torch.Tensor]],
                 max_norm: float, dtype: torch.dtype) -> None:
    """One optimizer step from a window of micro-batches: the whole AMP recipe (exercise 09's answer).

    ``zero_grad`` → per micro-batch: forward under autocast (``dtype``; float32 turns autocast off),
    cross-entropy ÷ ``len(micro_batches)``, ``scaler.scale(loss).backward()`` → ``scaler.unscale_`` →
    ``clip_grad_norm_`` (the true gradients) → ``scaler.step`` → ``scaler.update`` → ``scheduler.step()``
    only if the step was not skipped (the scale did not go down).
    """
    _check_window(model, optimizer, scaler, scheduler, micro_batches, max_norm, dtype)  # bad input: a clear error
    optimizer.zero_grad(set_to_none=True)
    device_type = micro_batches[0][0].device.type
    for x, y in micro_batches:
        with torch.autocast(device_type=device_type, dtype=dtype, enabled=dtype != torch.float32):
            loss = nn.functional.cross_entropy(model(x), y) / len(micro_batches)
        scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scale_before = scaler.get_scale()
    scaler.step(optimizer)
    scaler.update()
    if not step_was_skipped(scale_before, scaler.get_scale()):
        scheduler.step()


@torch.inference_mode()
def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor, dtype: torch.dtype = torch.float32,
             batch: int = 1024) -> tuple[float, float]:
    """``(accuracy, mean cross-entropy)`` of ``model`` on ``(x, y)``, under inference mode and autocast.

    The model is put in eval mode (dropout off) and back in the mode it was in.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module (got {type(model).__name__})")
    if not isinstance(x, torch.Tensor) or not isinstance(y, torch.Tensor) or len(x) != len(y) or len(x) == 0:
        raise ValueError("x and y must be tensors with the same, non-zero number of rows")
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of torch.float32, torch.bfloat16, torch.float16 (got {dtype!r})")
    batch = as_int("batch", batch, minimum=1)
    was_training = model.training
    model.eval()
    correct, loss_sum = 0, 0.0
    try:
        for start in range(0, len(x), batch):
            xb, yb = x[start:start + batch], y[start:start + batch]
            with torch.autocast(device_type=x.device.type, dtype=dtype, enabled=dtype != torch.float32):
                logits = model(xb)
            correct += int((logits.argmax(dim=1) == yb).sum())
            loss_sum += float(nn.functional.cross_entropy(logits.float(), yb, reduction="sum"))
    finally:
        model.train(was_training)
    return correct / len(x), loss_sum / len(x)


# ---------------------------------------------------------------------------------------------- memory
def _saved_bytes(model: nn.Module, x: torch.Tensor, y: torch.Tensor, dtype: torch.dtype) -> ActivationReport:
    """What autograd keeps for backward in one forward pass of a micro-batch (:class:`ampcourse.bench.ActivationReport`:
    activations and autocast's low-precision weight copies apart; each storage once, the parameters left out).

    ``x`` and ``y`` are copied first: a slice of the training set is a *view*, and a saved view keeps (and
    would be counted with) the whole training set's storage — the training loop gathers its micro-batches
    into fresh tensors, and so does this measurement. Run on a copy of the model with the RNG forked, so
    training is not disturbed."""
    model = copy.deepcopy(model)
    x, y = x.clone(), y.clone()

    def forward() -> torch.Tensor:
        with torch.autocast(device_type=x.device.type, dtype=dtype, enabled=dtype != torch.float32):
            return nn.functional.cross_entropy(model(x), y)

    with torch.random.fork_rng(devices=[x.device] if x.device.type == "cuda" else []):
        return saved_activation_bytes(forward, model)


# ----------------------------------------------------------------------------------------------- train
@dataclass(frozen=True)
class TrainResult:
    """What :func:`train` measured.

    Attributes:
        history: ``(optimizer step, validation accuracy)`` at step 0, every ``eval_every`` steps and at the end.
        val_losses: the validation loss at the same points.
        final_accuracy: the last validation accuracy.
        steps: windows trained in total (applied + skipped).
        total_steps: the windows of the whole run (``steps < total_steps``: stopped early by ``stop_after``).
        skipped_steps: the windows whose optimizer step was skipped (the scale went down).
        final_scale: the scaler's scale at the end (1.0 when no scaler is used).
        final_lr: the learning rate at the end.
        step_times: seconds per window, as measured in this call (a resumed run: only its own windows).
        saved: what one micro-batch's forward saves for backward (see :func:`_saved_bytes`).
        model: the trained model.
    """

    config: TrainConfig
    history: tuple[tuple[int, float], ...]
    val_losses: tuple[float, ...]
    final_accuracy: float
    steps: int
    total_steps: int
    skipped_steps: tuple[int, ...]
    final_scale: float
    final_lr: float
    step_times: tuple[float, ...] = field(repr=False)
    saved: ActivationReport = field(repr=False)
    model: nn.Module = field(repr=False)

    @property
    def activation_bytes(self) -> int:
        """Activation bytes one micro-batch's forward saves for backward (autocast's weight copies not included)."""
        return self.saved.total

    @property
    def weight_copy_bytes(self) -> int:
        """Bytes of autocast's low-precision weight copies saved for backward (0 in FP32): per step, not per sample."""
        return self.saved.copies_total

    @property
    def median_step_time(self) -> float:
        """Median seconds per optimizer step, leaving out the first (warm-up) steps when there are enough."""
        times = self.step_times[5:] if len(self.step_times) > 10 else self.step_times
        return statistics.median(times) if times else math.nan


def _windows_per_epoch(n_train: int, config: TrainConfig) -> int:
    micro = n_train // config.batch
    if micro == 0:
        raise ValueError(f"micro_batch {config.batch} is larger than the training set ({n_train} rows)")
    return math.ceil(micro / config.accum_steps)


def save_checkpoint(path: str | Path, state: dict[str, Any]) -> None:
    """``torch.save`` a checkpoint dict (written to a temporary file first, then renamed: never half-written)."""
    path = Path(path)
    if not isinstance(state, dict):
        raise TypeError(f"state must be a dict (got {type(state).__name__})")
    tmp = path.with_name(path.name + ".tmp")
    torch.save(state, tmp)
    tmp.replace(path)


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """Load a checkpoint written by :func:`save_checkpoint` (``weights_only=True``: plain data only)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no checkpoint at {path}")
    return torch.load(path, map_location="cpu", weights_only=True)


@dataclass
class TrainState:
    """Everything that decides the next step of :func:`train`: what a checkpoint holds (besides the config and the
    global RNG), built fresh by :func:`train` or filled from a checkpoint by :func:`restore_state`."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler
    scheduler: torch.optim.lr_scheduler.LRScheduler
    shuffle: torch.Generator  # the epoch's shuffled order is drawn from it
    step: int = 0
    order: torch.Tensor | None = None  # the current epoch's shuffled order of the training rows
    history: list[tuple[int, float]] = field(default_factory=list)  # (step, validation accuracy)
    val_losses: list[float] = field(default_factory=list)
    skipped: list[int] = field(default_factory=list)  # the steps GradScaler skipped


def checkpoint_state(state: TrainState, config: TrainConfig, device: torch.device) -> dict[str, Any]:
    """What a checkpoint must hold for a bit-identical resume: the config it was written by, model, optimizer,
    scaler and scheduler states, the step counter, the epoch's order and the generator that shuffles the next
    one, the global RNG (dropout) and, on CUDA, the device's RNG, and the history so far."""
    return {
        "config": config.as_dict(),
        "model": state.model.state_dict(),
        "optimizer": state.optimizer.state_dict(),
        "scaler": state.scaler.state_dict(),  # the scale and its growth tracker
        "scheduler": state.scheduler.state_dict(),
        "step": state.step,
        "order": state.order,
        "shuffle_rng": state.shuffle.get_state(),
        "torch_rng": torch.get_rng_state(),
        "cuda_rng": torch.cuda.get_rng_state(device) if device.type == "cuda" else None,
        "history": state.history, "val_losses": state.val_losses, "skipped": state.skipped,
    }


def restore_state(state: TrainState, saved: dict[str, Any], config: TrainConfig, device: torch.device, *,
                  source: str = "the checkpoint") -> None:
    """Load a :func:`checkpoint_state` dict into ``state`` (and the global RNGs); refuse one of another config
    (``source`` names the checkpoint in that message)."""
    if saved["config"] != config.as_dict():
        raise ValueError(f"{source} was written by another config: {saved['config']} (this one: {config.as_dict()})")
    state.model.load_state_dict(saved["model"])
    state.optimizer.load_state_dict(saved["optimizer"])
    state.scaler.load_state_dict(saved["scaler"])
    state.scheduler.load_state_dict(saved["scheduler"])
    state.shuffle.set_state(saved["shuffle_rng"])
    torch.set_rng_state(saved["torch_rng"])
    if device.type == "cuda" and saved.get("cuda_rng") is not None:
        torch.cuda.set_rng_state(saved["cuda_rng"], device)
    state.step, state.order = saved["step"], saved["order"]
    state.history = list(map(tuple, saved["history"]))
    state.val_losses, state.skipped = saved["val_losses"], saved["skipped"]


def _check_train_args(config: Any, device: Any, checkpoint_path: Any, resume: Any, stop_after: Any,
                      progress: Any, window_fn: Any) -> tuple[TrainConfig, torch.device, int | None, Callable]:
    config = _as_config(config)
    device = _as_device(device)
    if not isinstance(resume, bool):
        raise TypeError(f"resume must be a bool (got {resume!r})")
    if resume and checkpoint_path is None:
        raise ValueError("resume=True needs checkpoint_path, the file to resume from")
    if stop_after is not None:
        stop_after = as_int("stop_after", stop_after, minimum=1)
    if progress is not None and not callable(progress):
        raise TypeError(f"progress must be a function such as print, or None (got {progress!r})")
    step_fn = train_window if window_fn is None else window_fn
    if not callable(step_fn):
        raise TypeError(f"window_fn must be a function, or None (got {window_fn!r})")
    return config, device, stop_after, step_fn


def _train_val(config: TrainConfig, device: torch.device) -> tuple[tuple[torch.Tensor, torch.Tensor], ...]:
    """The digits' training and validation tensors on ``device`` (the split never changes: seed 0)."""
    digits = load_digits()
    train_index, val_index = split(len(digits), config.val_fraction, seed=0)
    return digits.tensors(train_index, device), digits.tensors(val_index, device)


def _fresh_state(config: TrainConfig, device: torch.device, total: int) -> TrainState:
    """Model, AdamW, GradScaler (enabled for float16 only), the warm-up + cosine schedule and the shuffling
    generator, in this order (the global RNG is seeded by the caller)."""
    model = make_model(config.size, config.seed, config.dropout).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.peak_lr, weight_decay=config.weight_decay)
    scaler = torch.amp.GradScaler(device.type, init_scale=config.init_scale, enabled=config.dtype == torch.float16)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, cosine_schedule(config.warmup_steps, total))
    return TrainState(model, optimizer, scaler, scheduler, torch.Generator().manual_seed(config.seed))


def _next_window(state: TrainState, config: TrainConfig, per_epoch: int, x: torch.Tensor, y: torch.Tensor,
                 device: torch.device) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The micro-batches of the next optimizer step; a new shuffled order at the start of each epoch."""
    position = state.step % per_epoch
    if position == 0:
        state.order = torch.randperm(len(x), generator=state.shuffle)
    n_micro = len(x) // config.batch
    first = position * config.accum_steps
    window = []
    for micro in range(first, min(first + config.accum_steps, n_micro)):
        rows = state.order[micro * config.batch:(micro + 1) * config.batch].to(device)
        window.append((x[rows], y[rows]))
    return window


def _timed(device: torch.device, fn: Callable[..., Any], *args: Any) -> float:
    """Seconds ``fn(*args)`` took, the device synchronised before and after."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    started = time.perf_counter()
    fn(*args)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - started


def _progress_line(state: TrainState, config: TrainConfig, total: int, per_epoch: int) -> str:
    step, (at, accuracy) = state.step, state.history[-1]
    return (f"{config.label}: step {step:>4}/{total}  epoch {1 + (step - 1) // per_epoch}/{config.n_epochs}  "
            f"lr {state.optimizer.param_groups[0]['lr']:.2e}  val accuracy {accuracy:.1%} "
            f"(at step {at})" + (f"  skipped {len(state.skipped)}" if state.scaler.is_enabled() else ""))


def train(config: TrainConfig, *, device: torch.device | str = "cpu", checkpoint_path: str | Path | None = None,
          resume: bool = False, stop_after: int | None = None, progress: Callable[[str], Any] | None = print,
          window_fn: Callable[..., Any] | None = None) -> TrainResult:
    """Train :func:`make_model` on the digits with the full recipe; see the module docstring.

    Args:
        config: the run (:class:`TrainConfig`).
        device: where to train.
        checkpoint_path: where to save a checkpoint when the run stops (``stop_after``) or ends.
        resume: continue from ``checkpoint_path`` (it must have been written with the same config).
        stop_after: stop after this many optimizer windows in total (counting those before a resume),
            save the checkpoint and return; ``None`` runs to the end.
        progress: called with a text line every ``log_every`` steps and once at the end (``None``: silent).
        window_fn: the function that makes one step from a window, with :func:`train_window`'s signature
            (the default); exercise 09 plugs the learner's in here.

    Resuming restores model, optimizer, scaler, scheduler, the step counter, the epoch's shuffled order,
    the shuffling generator and the global RNG (dropout), so ``stop_after=k`` + ``resume=True`` gives the
    same model, bit for bit, as one uninterrupted run (:func:`checkpoint_state`, :func:`restore_state`).
    """
    config, device, stop_after, step_fn = _check_train_args(config, device, checkpoint_path, resume, stop_after,
                                                            progress, window_fn)
    say = progress if progress is not None else (lambda line: None)
    (x_train, y_train), (x_val, y_val) = _train_val(config, device)
    per_epoch = _windows_per_epoch(len(x_train), config)
    total = per_epoch * config.n_epochs

    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(config.seed)
        state = _fresh_state(config, device, total)
        saved = _saved_bytes(state.model, x_train[:config.batch], y_train[:config.batch], config.dtype)
        if resume:
            _resume_from(checkpoint_path, state, config, device)
        else:
            _record_validation(state, x_val, y_val, config.dtype)
        step_times: list[float] = []
        state.model.train()
        end = total if stop_after is None else min(total, stop_after)
        while state.step < end:
            window = _next_window(state, config, per_epoch, x_train, y_train, device)
            scale_before = state.scaler.get_scale()
            step_times.append(_timed(device, step_fn, state.model, state.optimizer, state.scaler, state.scheduler,
                                     window, config.max_norm, config.dtype))
            if state.scaler.is_enabled() and step_was_skipped(scale_before, state.scaler.get_scale()):
                state.skipped.append(state.step)
            state.step += 1
            if state.step % config.eval_every == 0 or state.step == total:
                _record_validation(state, x_val, y_val, config.dtype)
            if state.step % config.log_every == 0 or state.step == end:
                say(_progress_line(state, config, total, per_epoch))
        if checkpoint_path is not None:
            save_checkpoint(checkpoint_path, checkpoint_state(state, config, device))
        _say_end(say, state, config, total, checkpoint_path)
    return TrainResult(config=config, history=tuple(state.history), val_losses=tuple(state.val_losses),
                       final_accuracy=state.history[-1][1], steps=state.step, total_steps=total,
                       skipped_steps=tuple(state.skipped), final_scale=state.scaler.get_scale(),
                       final_lr=state.optimizer.param_groups[0]["lr"], step_times=tuple(step_times), saved=saved,
                       model=state.model)


def _resume_from(path: str | Path, state: TrainState, config: TrainConfig, device: torch.device) -> None:
    restore_state(state, load_checkpoint(path), config, device, source=f"the checkpoint at {path}")


def _record_validation(state: TrainState, x_val: torch.Tensor, y_val: torch.Tensor, dtype: torch.dtype) -> None:
    accuracy, loss = evaluate(state.model, x_val, y_val, dtype)
    state.history.append((state.step, accuracy))
    state.val_losses.append(loss)


def _say_end(say: Callable[[str], Any], state: TrainState, config: TrainConfig, total: int,
             checkpoint_path: str | Path | None) -> None:
    if state.step == total:
        say(f"{config.label}: done — {total} steps, final validation accuracy {state.history[-1][1]:.1%}")
    else:
        say(f"{config.label}: stopped after step {state.step} of {total}"
            + (", checkpoint saved" if checkpoint_path is not None else ""))


# --------------------------------------------------------------------------------------------- compare
def _mean_std(values: Sequence[float]) -> tuple[float, float]:
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def _accuracies(name: str, values: Any) -> list[float]:
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise TypeError(f"{name} must be a list of accuracies, one per seed (got {type(values).__name__})")
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in values):
        raise ValueError(f"{name} must hold finite numbers, one accuracy per seed (got {list(values)!r})")
    return [float(v) for v in values]


def paired_difference(fp32: Sequence[float], amp: Sequence[float]) -> tuple[float, float]:
    """``(mean, standard error)`` of the per-seed differences ``amp − fp32`` (sample std, n − 1, over √n).

    The two lists are paired by seed (same initial weights, data order and dropout), so each seed's luck
    cancels in its difference: the noise of the mean difference is its standard error, not FP32's own
    seed-to-seed spread.
    """
    fp32, amp = _accuracies("fp32", fp32), _accuracies("amp", amp)
    if len(fp32) != len(amp) or len(fp32) < 2:
        raise ValueError(f"fp32 and amp must hold one accuracy per seed, at least 2 seeds each and as many in both "
                         f"(got {len(fp32)} and {len(amp)})")
    mean, std = _mean_std([a - f for f, a in zip(fp32, amp, strict=True)])
    return mean, std / math.sqrt(len(fp32))


def paired_verdict(fp32: Sequence[float], amp: Sequence[float]) -> str:
    """``"within noise"``, ``"amp better"`` or ``"amp worse"``: the course's one verdict rule (:data:`VERDICT_RULE`).

    |mean of the per-seed differences| ≤ :data:`NOISE_STANDARD_ERRORS` standard errors is noise; otherwise
    its sign says which is better. Identical runs (every difference 0) are within noise. A difference that is
    the same on every seed (standard error 0) is "real" by the rule however small — the rule's verdict, not a
    proof: with 3–5 seeds a sample std of 0 is weak evidence that the noise is 0 (accuracies move in steps of
    one validation image, 1/359), so such a verdict deserves more seeds before it is believed.
    """
    mean, _ = paired_difference(fp32, amp)  # validates both lists
    if _within_noise_exactly(fp32, amp):
        return "within noise"
    return "amp better" if mean > 0 else "amp worse"


def _as_fraction(value: float) -> fractions.Fraction:
    """An accuracy as the fraction it stands for (count / images, denominators up to 10^6) when the float is that
    fraction rounded; any other float exactly as it is."""
    exact = fractions.Fraction(value)
    near = exact.limit_denominator(1_000_000)
    return near if abs(near - exact) <= abs(exact) * 2.0**-50 else exact


def _within_noise_exactly(fp32: Sequence[float], amp: Sequence[float]) -> bool:
    """|mean(d)| ≤ k · std(d) / √n in exact rational arithmetic, squared: mean² · n · (n − 1) ≤ k² · Σ(d − mean)².
    A tie (|mean| exactly k standard errors, as counts out of a few hundred images can give) is within noise on
    every machine, not decided by the last bit of a float square root."""
    d = [_as_fraction(a) - _as_fraction(f) for f, a in zip(fp32, amp, strict=True)]
    n = len(d)
    mean = sum(d) / n
    return mean * mean * n * (n - 1) <= NOISE_STANDARD_ERRORS**2 * sum((x - mean) ** 2 for x in d)


def noise_interval_coverage(n_seeds: int) -> float:
    """How often pure noise stays within the rule's band: P(|T| ≤ :data:`NOISE_STANDARD_ERRORS`) for Student's t
    with ``n_seeds − 1`` degrees of freedom (normal differences). 2 standard errors is an ≈ 82 % interval at 3
    seeds and ≈ 88 % at 5 — lighter than a 95 % t-test, which the course does not use."""
    if isinstance(n_seeds, bool) or not isinstance(n_seeds, int):
        raise TypeError(f"n_seeds must be an int, got {type(n_seeds).__name__}")
    if n_seeds < 2:
        raise ValueError(f"n_seeds must be at least 2 (a standard error needs two differences), got {n_seeds}")
    t = torch.distributions.StudentT(torch.tensor(float(n_seeds - 1), dtype=torch.float64))
    x = torch.linspace(-NOISE_STANDARD_ERRORS, NOISE_STANDARD_ERRORS, 20001, dtype=torch.float64)
    return float(torch.trapezoid(t.log_prob(x).exp(), x))


@dataclass(frozen=True)
class Comparison:
    """FP32 and AMP runs from the same seeds (see :func:`compare`)."""

    seeds: tuple[int, ...]
    fp32: tuple[TrainResult, ...] = field(repr=False)
    amp: tuple[TrainResult, ...] = field(repr=False)
    device: str

    def accuracies(self, which: str) -> list[float]:
        runs = {"fp32": self.fp32, "amp": self.amp}[which]
        return [r.final_accuracy for r in runs]

    @property
    def differences(self) -> list[float]:
        """AMP − FP32 final accuracy, seed by seed (a paired comparison: same init, same data order)."""
        return [a - b for a, b in zip(self.accuracies("amp"), self.accuracies("fp32"), strict=True)]

    def step_time(self, which: str) -> float:
        """Median seconds per optimizer step over all the runs of one kind."""
        runs = {"fp32": self.fp32, "amp": self.amp}[which]
        return statistics.median(t for r in runs for t in (r.step_times[5:] if len(r.step_times) > 10
                                                           else r.step_times))

    def table(self) -> Table:
        """Accuracy mean ± std over seeds, and the bytes one micro-batch saves for backward — activations and
        autocast's weight copies apart (deterministic; step times are separate)."""
        rows = []
        for which, runs in (("fp32", self.fp32), ("amp", self.amp)):
            mean, std = _mean_std(self.accuracies(which))
            rows.append({"run": runs[0].config.label, "seeds": len(runs),
                         "val accuracy (mean ± std)": f"{mean:.2%} ± {std:.2%}",
                         "min – max": f"{min(self.accuracies(which)):.2%} – {max(self.accuracies(which)):.2%}",
                         "skipped steps": sum(len(r.skipped_steps) for r in runs),
                         "activations / micro-batch (bytes)": f"{runs[0].activation_bytes:,}",
                         "+ weight copies (bytes)": f"{runs[0].weight_copy_bytes:,}"})
        return Table(rows, title=f"{self.fp32[0].config.size} model on {self.device}, seeds {list(self.seeds)}")

    def summary(self) -> str:
        """The measured numbers behind :meth:`verdict`: mean ± std of the paired differences, their standard
        error and FP32's own seed-to-seed spread. Its digits depend on the machine (bf16 and fp32 kernels
        round differently on different CPUs), so a notebook shows it in an output that is not compared.
        """
        diffs = self.differences
        mean, std = _mean_std(diffs)
        spread = _mean_std(self.accuracies("fp32"))[1]
        n = len(diffs)
        if all(d == 0 for d in diffs):
            return (f"AMP − FP32, paired by seed: identical final accuracy on all {n} seeds here (difference 0); "
                    f"FP32's own seed-to-seed spread: {spread:.2%}.")
        error = std / math.sqrt(n) if n > 1 else math.nan
        verdict = paired_verdict(self.accuracies("fp32"), self.accuracies("amp")) if n > 1 else "one seed"
        return (f"AMP − FP32, paired by seed: {mean:+.2%} ± {std:.2%} (mean ± std over {n} seeds; standard error "
                f"{error:.2%}); FP32's own seed-to-seed spread: {spread:.2%}. The paired test here: {verdict}.")

    def verdict(self, tolerance: float = VERDICT_TOLERANCE) -> str:
        """Is AMP as accurate as FP32? Two yes/no answers with fixed wording, the same on every machine.

        1. Every seed's AMP accuracy is within ``tolerance`` (a fraction: 0.01 = one percentage point) of the
           FP32 run from the same seed.
        2. The mean paired difference is within ``tolerance`` even at 2 standard errors: |mean| + 2·SE ≤
           ``tolerance`` (mean and SE from :func:`paired_difference`, the numbers :func:`paired_verdict` judges).
           That is an equivalence test: it holds whether or not the paired test finds a (small) difference, so
           it reads the same on CPUs where bf16 rounds one validation image differently. Whether the
           difference is *noise* (:func:`paired_verdict`) is a measurement: :meth:`summary` prints it.

        The wording never depends on the numbers, only the True/False answers do: a verdict that holds on one
        CPU holds, in the same words, on another whose kernels round the last bits differently
        (:meth:`summary` has the numbers).
        """
        tolerance = as_positive("tolerance", tolerance)
        diffs = self.differences
        n = len(diffs)
        close = all(abs(d) <= tolerance for d in diffs)
        points = f"{100 * tolerance:g} percentage point" + ("" if 100 * tolerance == 1 else "s")
        first = f"AMP within {points} of FP32 on each of the {n} seeds: {close}"
        if n < 2:
            return first + "\nwithin seed-to-seed noise: cannot tell from one seed (run more seeds)"
        mean, error = paired_difference(self.accuracies("fp32"), self.accuracies("amp"))
        equivalent = abs(mean) + NOISE_STANDARD_ERRORS * error <= tolerance
        return (first + f"\nmean AMP − FP32 difference, paired by seed, within {points} even at 2 standard errors: "
                f"{equivalent}")


def compare(config: TrainConfig, seeds: Sequence[int] = (0, 1, 2, 3, 4), *, device: torch.device | str = "cpu",
            amp_dtype: torch.dtype | None = None, progress: Callable[[str], Any] | None = None,
            reuse: Sequence[TrainResult] = ()) -> Comparison:
    """Train FP32 and AMP (``amp_dtype``, default :func:`recommended_dtype`) from each seed; same everything else.

    ``config.dtype`` is ignored (each run sets its own); ``progress`` gets one line per run. ``reuse``: results
    of finished, uninterrupted runs on this device; one whose config is exactly the one a seed needs is used
    instead of training it again (the runs are deterministic, so the result would be the same).
    """
    config = _as_config(config)
    device = _as_device(device)
    if isinstance(seeds, (str, bytes)) or not isinstance(seeds, Sequence) or not seeds:
        raise TypeError(f"seeds must be a non-empty list of ints (got {seeds!r})")
    seeds = tuple(as_int("seed", s, minimum=0) for s in seeds)
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must be distinct (got {list(seeds)})")
    amp_dtype = recommended_dtype(device) if amp_dtype is None else amp_dtype
    if amp_dtype not in (torch.bfloat16, torch.float16):
        raise ValueError(f"amp_dtype must be torch.bfloat16 or torch.float16 (got {amp_dtype!r})")
    if isinstance(reuse, (str, bytes)) or not isinstance(reuse, Sequence) \
            or not all(isinstance(r, TrainResult) for r in reuse):
        raise TypeError("reuse must be a list of TrainResult from train()")
    done = {r.config: r for r in reuse if r.steps == r.total_steps}
    say = progress if progress is not None else (lambda line: None)
    fp32, amp = [], []
    for seed in seeds:
        for runs, dtype in ((fp32, torch.float32), (amp, amp_dtype)):
            wanted = replace(config, dtype=dtype, seed=seed)
            result = done.get(wanted) or train(wanted, device=device, progress=None)
            runs.append(result)
            say(f"seed {seed}: {result.config.label:<28} final validation accuracy {result.final_accuracy:.2%}"
                + (" (the run above)" if wanted in done else ""))
    return Comparison(seeds=seeds, fp32=tuple(fp32), amp=tuple(amp), device=str(device))


# --------------------------------------------------------------------------------------------- figures
MAX_PNG_DIGITS = 200  # digits_png draws one subplot per digit


def digits_png(digits: Digits, n: int = 20) -> Png:
    """The first ``n`` images with their labels, as a PNG (grey levels 0..16)."""
    from matplotlib.figure import Figure

    from .widgets.base import figure_png

    if not isinstance(digits, Digits):
        raise TypeError(f"digits must be the Digits from load_digits() (got {type(digits).__name__})")
    n = as_int("n", n, minimum=1)
    if n > MAX_PNG_DIGITS:
        raise ValueError(f"n must be at most {MAX_PNG_DIGITS} (one picture of {n} digits would take minutes to draw; "
                         f"got {n})")
    n = min(n, len(digits))
    cols = min(n, 10)
    rows = math.ceil(n / cols)
    fig = Figure(figsize=(0.8 * cols, 0.95 * rows))
    for i in range(n):
        ax = fig.add_subplot(rows, cols, i + 1)
        ax.imshow(digits.images[i], cmap="gray_r", vmin=0, vmax=16)
        ax.set_title(str(int(digits.labels[i])), fontsize=9)
        ax.set_axis_off()
    fig.suptitle("8×8 digits (pixel values 0..16) and their labels", fontsize=10)
    fig.tight_layout()
    return figure_png(fig)


def curves_png(comparison: Comparison) -> Png:
    """Validation accuracy per optimizer step: every seed thin, the mean over seeds thick; FP32 vs AMP."""
    from matplotlib.figure import Figure

    from .widgets.base import COLORS, figure_png

    if not isinstance(comparison, Comparison):
        raise TypeError(f"comparison must be a Comparison from compare() (got {type(comparison).__name__})")
    fig = Figure(figsize=(7.5, 3.4))
    ax = fig.add_subplot()
    for runs, color, style in ((comparison.fp32, COLORS["blue"], "-"), (comparison.amp, COLORS["vermillion"], "--")):
        steps = [s for s, _ in runs[0].history]
        for run in runs:
            ax.plot(steps, [100 * a for _, a in run.history], color=color, alpha=0.25, linewidth=1, linestyle=style)
        mean = [100 * statistics.fmean(run.history[i][1] for run in runs) for i in range(len(steps))]
        ax.plot(steps, mean, color=color, linewidth=2.2, linestyle=style,
                label=f"{runs[0].config.label} (mean of {len(runs)} seeds)")
    ax.set_ylim(0, 100)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("validation accuracy (%)")
    ax.set_title(f"FP32 vs AMP from the same seeds ({comparison.fp32[0].config.size} model, {comparison.device})")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    return figure_png(fig)
