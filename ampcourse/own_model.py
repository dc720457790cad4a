"""Lesson 11 (your own model): a small decoder-only transformer, a character corpus made from the course's own
lesson text, a training loop that feeds a recorder, and four broken runs that practitioners really hit.

The model is GPT-shaped and small (:data:`LESSON` has about 200 thousand parameters): token and position
embeddings, blocks of LayerNorm → causal self-attention → LayerNorm → MLP with residual connections, a last
LayerNorm and a linear head. The attention is written out (:class:`Attention`): the learner sees the scores,
the scaling and the mask; ``attention="sdpa"`` runs ``F.scaled_dot_product_attention`` instead. The attention
module has no parameters and no children (its ``qkv`` and ``proj`` linears are siblings in the block), so an
inf it makes is reported at ``blocks.N.attn`` and nowhere inside it.

The corpus (:func:`corpus`) is the markdown of the lesson notebooks, read offline, in file order, reduced to a
fixed 96-character alphabet: the same bytes on every machine for the same commit of the course.

The four broken runs (:data:`BROKEN_RUNS`, one table that the lesson, the exercise, its checks and the tests
read) each start from a copy of a trained model and fine-tune it for a few steps under a recorder:

=================  ===========================================  ============================  =================
run                what is wrong                                what the recorder reports     the fix
=================  ===========================================  ============================  =================
attention          fp16 scores ``q @ kᵀ`` scaled *after* the    ``overflow`` at               ``attention="sdpa"``
                   product, with grown queries and keys         ``blocks.0.attn``             (scaling q first
                   (largest ``q · k`` 16 × 65504)                                             is not enough)
unsafe_constant    a leftover static loss scale ``loss × 2²⁴``  ``scale_collapse``            drop the constant
                   under a GradScaler
bf16_checkpoint    weights that are fine in bf16, fine-tuned    ``overflow`` at               fine-tune in bf16
                   in fp16 (an MLP output above 65504)          ``blocks.1.mlp.out``
scheduler          ``scheduler.step()`` on every iteration,     ``scheduler_on_skipped_step`` step it only when
                   skipped steps included                                                     the step was applied
=================  ===========================================  ============================  =================

The grown weights of the first and third runs are constructed (:func:`grow_attention_logits`,
:func:`grow_mlp_output`): a few minutes of CPU training cannot grow them, large pretrained models do.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import re
import unicodedata
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .scaler_run import step_was_skipped
from .validate import as_device, as_int, as_positive

__all__ = [
    "ALPHABET", "ATTENTIONS", "BROKEN_RUNS", "LESSON", "TINY", "Attention", "BrokenRun", "Corpus", "GPTConfig",
    "Run", "STATIC_LOSS_SCALE", "TinyGPT", "batches", "corpus", "decode", "encode", "grow_attention_logits",
    "grow_mlp_output", "largest_score", "lesson_text", "peak_output", "pretrain", "run_attention",
    "run_bf16_checkpoint", "run_scheduler", "run_unsafe_constant", "WHAT_TO_DO", "train_steps", "ATTENTION_GROWTH",
    "reports",
    "train_steps_scheduler_every_step", "train_steps_static_scale", "clean", "Size", "LESSON_SIZE", "TINY_SIZE",
    "SKIP_SCALE", "FP16_MAX",
]

ROOT = Path(__file__).resolve().parent.parent

# --- the corpus ----------------------------------------------------------------------------------------------

ALPHABET = "\n" + "".join(chr(c) for c in range(32, 127))
"""The model's characters: newline and printable ASCII (96). Anything else is folded or dropped by :func:`clean`."""

_INDEX = {ch: i for i, ch in enumerate(ALPHABET)}
_FOLD = {"→": "->", "←": "<-", "×": "x", "·": "-", "—": "-", "–": "-", "’": "'", "‘": "'", "“": '"', "”": '"',
         "…": "...", "≤": "<=", "≥": ">=", "≈": "~", "−": "-", "²": "2", "³": "3", "⁴": "4", "µ": "u", "μ": "u"}


def clean(text: str) -> str:
    """``text`` in :data:`ALPHABET`: arrows and dashes spelt in ASCII, accents dropped, other characters removed,
    runs of spaces and blank lines collapsed.

    >>> clean("bf16 → fp16 · “naïve”   x²")
    'bf16 -> fp16 - "naive" x2'
    """
    text = "".join(_FOLD.get(ch, ch) for ch in text)
    text = unicodedata.normalize("NFKD", text)
    text = "".join(ch for ch in text if ch in _INDEX)
    text = re.sub(r"[ \t]+", " ", text)
    return re.sub(r"\n\s*\n+", "\n\n", text).strip()


def _markdown(notebook: Path) -> str:
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    parts = []
    for cell in cells:
        if cell["cell_type"] != "markdown" or "nav" in cell.get("metadata", {}).get("tags", []):
            continue
        source = "".join(cell["source"])
        source = re.sub(r"```.*?```", "", source, flags=re.S)  # code fences: the corpus is prose
        source = re.sub(r"<!--.*?-->", "", source, flags=re.S)
        parts.append(source)
    return "\n\n".join(parts)


def lesson_text(root: Path = ROOT, before: str = "11") -> tuple[str, list[str]]:
    """The cleaned markdown of the lessons numbered below ``before`` (``notebooks/NN_*.ipynb``, in name order)
    and the file names it came from. Lesson 11 is left out by default, so the corpus does not depend on the
    lesson that trains on it."""
    folder = Path(root) / "notebooks"
    files = sorted(p for p in folder.glob("[0-9][0-9]_*.ipynb") if p.name[:2] < before)
    if not files:
        raise FileNotFoundError(f"no lesson notebooks under {folder}: the corpus is made from the course's "
                                "lessons, so run from a clone of the course (an installed wheel has no notebooks)")
    return clean("\n\n".join(_markdown(p) for p in files)), [p.name for p in files]


def encode(text: str) -> torch.Tensor:
    """The characters of ``text`` as indices into :data:`ALPHABET` (int64); a character outside it is a ValueError."""
    missing = sorted(set(text) - set(_INDEX))
    if missing:
        raise ValueError(f"text holds characters outside ALPHABET: {missing[:5]!r}; pass it through clean() first")
    return torch.tensor([_INDEX[ch] for ch in text], dtype=torch.int64)


def decode(ids: torch.Tensor | list[int]) -> str:
    """The text of a sequence of indices into :data:`ALPHABET`."""
    return "".join(ALPHABET[int(i)] for i in ids)


@dataclass(frozen=True)
class Corpus:
    """The training text: ``text``, its indices ``ids``, the notebooks it came from and its SHA-256."""

    text: str
    ids: torch.Tensor = field(repr=False)
    files: tuple[str, ...]
    sha256: str

    def __len__(self) -> int:
        return len(self.text)


def corpus(root: Path = ROOT) -> Corpus:
    """The character corpus of lesson 11: :func:`lesson_text`, encoded (deterministic: same files, same bytes)."""
    text, files = lesson_text(root)
    return Corpus(text, encode(text), tuple(files), hashlib.sha256(text.encode()).hexdigest())


def batches(ids: torch.Tensor, *, batch: int, block: int, steps: int, seed: int = 0,
            device: torch.device | str = "cpu") -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """``steps`` batches of ``batch`` windows of ``block`` characters (inputs, next-character targets), at offsets
    drawn from a generator seeded with ``seed`` (the same windows on every machine)."""
    batch, block, steps = as_int("batch", batch, minimum=1), as_int("block", block, minimum=1), as_int(
        "steps", steps, minimum=0)
    if len(ids) <= block + 1:
        raise ValueError(f"ids must be longer than block + 1 = {block + 1} (got {len(ids)})")
    device = as_device("device", device)
    generator = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        start = torch.randint(0, len(ids) - block - 1, (batch,), generator=generator)
        window = torch.stack([ids[s:s + block + 1] for s in start.tolist()])
        yield window[:, :-1].to(device), window[:, 1:].to(device)


# --- the model -----------------------------------------------------------------------------------------------

ATTENTIONS = ("manual", "sdpa", "scale_after")
"""How :class:`Attention` computes: scale q then ``q @ kᵀ`` (``manual``), ``F.scaled_dot_product_attention``
(``sdpa``), or ``q @ kᵀ`` then scale (``scale_after``, the broken one of lesson 11)."""


@dataclass(frozen=True)
class GPTConfig:
    """The model's shape. ``block``: the context length; ``width``: the residual stream; ``mlp``: the MLP's
    hidden width as a multiple of ``width``."""

    block: int = 32
    width: int = 64
    heads: int = 4
    layers: int = 4
    mlp: int = 4
    attention: str = "manual"
    mask_value: float = -math.inf

    def __post_init__(self):
        for name in ("block", "width", "heads", "layers", "mlp"):
            as_int(name, getattr(self, name), minimum=1)
        if self.width % self.heads:
            raise ValueError(f"width must be a multiple of heads (got width={self.width}, heads={self.heads})")
        if self.attention not in ATTENTIONS:
            raise ValueError(f"attention must be one of {ATTENTIONS} (got {self.attention!r})")


LESSON = GPTConfig()
TINY = GPTConfig(block=16, width=64, heads=4, layers=2)


class Attention(nn.Module):
    """Causal self-attention on ``(q, k, v)`` already projected: ``(batch, time, 3 × width)`` in,
    ``(batch, time, width)`` out. No parameters, no children."""

    def __init__(self, heads: int, attention: str = "manual", mask_value: float = -math.inf):
        super().__init__()
        self.heads, self.attention, self.mask_value = heads, attention, mask_value

    def forward(self, qkv: torch.Tensor) -> torch.Tensor:
        batch, time, three_width = qkv.shape
        q, k, v = qkv.view(batch, time, 3, self.heads, three_width // (3 * self.heads)).permute(2, 0, 3, 1, 4)
        if self.attention == "sdpa":
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            scale = q.shape[-1] ** -0.5
            if self.attention == "manual":
                scores = (q * scale) @ k.transpose(-2, -1)       # scale first: the product stays small
            else:
                scores = (q @ k.transpose(-2, -1)) * scale       # the product first: it can pass 65504 in fp16
            future = torch.ones(time, time, dtype=torch.bool, device=qkv.device).triu(1)
            scores = scores.masked_fill(future, self.mask_value)  # a position sees itself and the past only
            out = torch.softmax(scores, dim=-1) @ v
        return out.transpose(1, 2).reshape(batch, time, three_width // 3)


class MLP(nn.Module):
    """``out(gelu(fc(x)))``, ``mlp × width`` wide inside."""

    def __init__(self, width: int, mult: int):
        super().__init__()
        self.fc, self.act, self.out = nn.Linear(width, mult * width), nn.GELU(), nn.Linear(mult * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.act(self.fc(x)))


class Block(nn.Module):
    """``x + proj(attn(qkv(ln1(x))))``, then ``x + mlp(ln2(x))``."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.ln1, self.qkv = nn.LayerNorm(config.width), nn.Linear(config.width, 3 * config.width)
        self.attn = Attention(config.heads, config.attention, config.mask_value)
        self.proj, self.ln2 = nn.Linear(config.width, config.width), nn.LayerNorm(config.width)
        self.mlp = MLP(config.width, config.mlp)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.proj(self.attn(self.qkv(self.ln1(x))))
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    """A decoder-only character transformer: ``(batch, time)`` indices in, ``(batch, time, 96)`` logits out."""

    def __init__(self, config: GPTConfig = LESSON, seed: int = 0):
        super().__init__()
        if not isinstance(config, GPTConfig):
            raise TypeError(f"config must be a GPTConfig (got {type(config).__name__})")
        self.config = config
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.tok, self.pos = nn.Embedding(len(ALPHABET), config.width), nn.Embedding(config.block, config.width)
            self.blocks = nn.Sequential(*[Block(config) for _ in range(config.layers)])
            self.ln, self.head = nn.LayerNorm(config.width), nn.Linear(config.width, len(ALPHABET), bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        if ids.shape[-1] > self.config.block:
            raise ValueError(f"ids has {ids.shape[-1]} positions; the model's block is {self.config.block}")
        x = self.tok(ids) + self.pos(torch.arange(ids.shape[-1], device=ids.device))
        return self.head(self.ln(self.blocks(x)))

    def set_attention(self, attention: str) -> TinyGPT:
        """Switch every block's attention (``"manual"``, ``"sdpa"`` or ``"scale_after"``); returns the model."""
        if attention not in ATTENTIONS:
            raise ValueError(f"attention must be one of {ATTENTIONS} (got {attention!r})")
        for block in self.blocks:
            block.attn.attention = attention
        self.config = replace(self.config, attention=attention)
        return self


# --- the training loop ---------------------------------------------------------------------------------------

@dataclass
class Run:
    """What a run left: the model, its recorder, the losses and the scales (after each step; empty without a
    scaler) and the learning rates (after each step)."""

    model: TinyGPT
    recorder: Any
    losses: list[float] = field(default_factory=list)
    scales: list[float] = field(default_factory=list)
    lrs: list[float] = field(default_factory=list)

    def findings(self):
        """The recorder's findings (``[]`` without a recorder)."""
        return [] if self.recorder is None else self.recorder.findings()

    def kinds(self) -> list[str]:
        """The kinds of the findings, in order, each once."""
        return list(dict.fromkeys(f.kind for f in self.findings()))


def _loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean next-character cross-entropy (autocast computes ``cross_entropy`` in float32)."""
    return F.cross_entropy(model(x).flatten(0, 1), y.flatten())


def train_steps(model, optimizer, data, *, dtype, scaler=None, scheduler=None, recorder=None) -> Run:
    """One optimizer step per batch of ``data``, in autocast ``dtype`` (``float32``: autocast off), with an
    optional ``GradScaler``, learning-rate scheduler and recorder (``recorder.step(loss)`` closes each step)."""
    run = Run(model, recorder)
    device_type = next(model.parameters()).device.type
    for x, y in data:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device_type=device_type, dtype=dtype, enabled=dtype != torch.float32):
            loss = _loss(model, x, y)
        if scaler is None:
            loss.backward()
            optimizer.step()
            applied = True
        else:
            scaled = scaler.scale(loss)
            scale = scaler.get_scale()  # read after scale(): see scaler_run.step_was_skipped
            scaled.backward()
            scaler.step(optimizer)      # skipped when a gradient is inf/NaN
            scaler.update()
            applied = not step_was_skipped(scale, scaler.get_scale())  # a skip always lowers the scale
        if scheduler is not None and applied:
            scheduler.step()            # the schedule counts the steps that were applied
        if recorder is not None:
            recorder.step(loss)
        _log(run, loss, scaler, optimizer)
    return run


def _log(run: Run, loss: torch.Tensor, scaler, optimizer) -> None:
    run.losses.append(float(loss.detach()))
    if scaler is not None:
        run.scales.append(float(scaler.get_scale()))
    run.lrs.append(float(optimizer.param_groups[0]["lr"]))


STATIC_LOSS_SCALE = 2.0**24
"""The leftover constant of the ``unsafe_constant`` run: a static loss scale from a recipe written before AMP."""


def train_steps_static_scale(model, optimizer, data, *, dtype, scaler, recorder=None) -> Run:
    """Broken (b): :func:`train_steps` with a static loss scale left in from a hand-written fp16 recipe, under a
    GradScaler that scales again."""
    run = Run(model, recorder)
    device_type = next(model.parameters()).device.type
    for x, y in data:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device_type=device_type, dtype=dtype):
            loss = _loss(model, x, y)
        scaler.scale(loss * STATIC_LOSS_SCALE).backward()   # the constant: 2**24 × the scaler's own scale
        scaler.step(optimizer)
        scaler.update()
        if recorder is not None:
            recorder.step(loss)
        _log(run, loss, scaler, optimizer)
    return run


def train_steps_scheduler_every_step(model, optimizer, data, *, dtype, scaler, scheduler, recorder=None) -> Run:
    """Broken (d): :func:`train_steps` that steps the scheduler on every iteration, skipped steps included."""
    run = Run(model, recorder)
    device_type = next(model.parameters()).device.type
    for x, y in data:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device_type=device_type, dtype=dtype):
            loss = _loss(model, x, y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        scheduler.step()                # every iteration: the schedule runs on while steps are skipped
        if recorder is not None:
            recorder.step(loss)
        _log(run, loss, scaler, optimizer)
    return run


# --- the trained model and the grown weights -----------------------------------------------------------------

@dataclass(frozen=True)
class Size:
    """How long to train and fine-tune: steps, batch, learning rate."""

    pretrain_steps: int = 30
    finetune_steps: int = 10
    collapse_steps: int = 30
    batch: int = 8
    lr: float = 3e-3


LESSON_SIZE = Size()

TINY_SIZE = Size(pretrain_steps=8, finetune_steps=10, collapse_steps=30, batch=4)


def pretrain(config: GPTConfig = LESSON, size: Size = LESSON_SIZE, *, dtype: torch.dtype = torch.bfloat16,
             device: torch.device | str = "cpu", recorder_factory: Callable[..., Any] | None = None,
             seed: int = 0) -> Run:
    """Train a :class:`TinyGPT` on the corpus for ``size.pretrain_steps`` AdamW steps in ``dtype`` (no scaler:
    bf16 or fp32), under ``recorder_factory(model, optimizer)`` when given."""
    device = as_device("device", device)
    model = TinyGPT(config, seed=seed).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=as_positive("lr", size.lr))
    recorder = None if recorder_factory is None else recorder_factory(model, optimizer)
    data = batches(corpus().ids, batch=size.batch, block=config.block, steps=size.pretrain_steps, seed=seed,
                   device=device)
    return train_steps(model, optimizer, data, dtype=dtype, recorder=recorder)


FP16_MAX = float(torch.finfo(torch.float16).max)


def largest_score(model: TinyGPT, ids: torch.Tensor, block: int = 0, head: int = 0) -> float:
    """The largest ``|q · k|`` (before the 1/√d scaling) of one head of ``blocks[block]`` on ``ids``, in float32,
    over the positions the causal mask keeps."""
    found: list[float] = []

    def hook(module, inputs, output):
        batch, time, _ = output.shape
        q, k, _ = output.float().view(batch, time, 3, model.config.heads, -1).permute(2, 0, 3, 1, 4)
        kept = torch.ones(time, time, dtype=torch.bool, device=output.device).tril()
        scores = q[:, head] @ k[:, head].transpose(-2, -1)
        found.append(float(scores.abs().masked_fill(~kept, 0).max()))

    handle = model.blocks[block].qkv.register_forward_hook(hook)
    try:
        with torch.no_grad(), torch.autocast(ids.device.type, enabled=False):
            model(ids)
    finally:
        handle.remove()
    return found[0]


def peak_output(model: TinyGPT, ids: torch.Tensor, name: str) -> float:
    """The largest ``|output|`` of the submodule ``name`` on ``ids``, in float32."""
    found: list[float] = []
    handle = model.get_submodule(name).register_forward_hook(
        lambda module, inputs, output: found.append(float(output.detach().float().abs().max())))
    try:
        with torch.no_grad(), torch.autocast(ids.device.type, enabled=False):
            model(ids)
    finally:
        handle.remove()
    return found[0]


ATTENTION_GROWTH = 16.0
"""The attention run's largest ``q · k``, in units of 65504: 16, so that even scaling q by 1/√d = 1/4 first
leaves scores of 4 × 65504 (the scale-first variant overflows too; SDPA is the fix)."""


def grow_attention_logits(model: TinyGPT, ids: torch.Tensor, factor: float = ATTENTION_GROWTH, block: int = 0,
                          head: int = 0) -> float:
    """Multiply the query and key rows of one head of ``blocks[block].qkv`` by one gain, chosen so that that
    head's largest ``q · k`` on ``ids`` becomes ``factor × 65504`` (as attention logits grow in some heads of large
    trained models). In place; returns the gain."""
    factor = as_positive("factor", factor)
    gain = math.sqrt(factor * FP16_MAX / largest_score(model, ids, block, head))
    width, size = model.config.width, model.config.width // model.config.heads
    rows = [*range(head * size, (head + 1) * size), *range(width + head * size, width + (head + 1) * size)]
    with torch.no_grad():
        qkv = model.blocks[block].qkv
        qkv.weight[rows] *= gain
        qkv.bias[rows] *= gain
    return gain


def grow_mlp_output(model: TinyGPT, ids: torch.Tensor, factor: float = 4.0, block: int = 1) -> float:
    """Multiply ``blocks[block].mlp.out`` by one gain, chosen so that its largest output on ``ids`` becomes
    ``factor × 65504``: within bf16's range (fp32's), past fp16's — as in checkpoints trained in bf16.
    In place; returns the gain."""
    factor = as_positive("factor", factor)
    name = f"blocks.{block}.mlp.out"
    gain = factor * FP16_MAX / peak_output(model, ids, name)
    with torch.no_grad():
        out = model.get_submodule(name)
        out.weight *= gain
        out.bias *= gain
    return gain


# --- the four broken runs ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class BrokenRun:
    """One row of :data:`BROKEN_RUNS`: what is wrong, what the recorder reports (``kind`` at ``where``; ``where``
    is ``None`` for a finding about the whole run), the fix."""

    name: str
    wrong: str
    kind: str
    where: str | None
    fix: str


BROKEN_RUNS: dict[str, BrokenRun] = {row.name: row for row in (
    BrokenRun("attention", "fp16 attention scores computed as q @ kᵀ and scaled after the product, in a model "
              "with one head whose queries and keys have grown", "overflow", "blocks.0.attn",
              "use F.scaled_dot_product_attention: scaling q before the product buys only a factor √d"),
    BrokenRun("unsafe_constant", "a static loss scale of 2**24 left in the loss under a GradScaler",
              "scale_collapse", None, "remove the constant: the GradScaler does the scaling"),
    BrokenRun("bf16_checkpoint", "a checkpoint whose MLP output fits bf16 but passes 65504, fine-tuned in fp16",
              "overflow", "blocks.1.mlp.out",
              "fine-tune in bf16, or keep that layer in fp32 where only fp16 is fast"),
    BrokenRun("scheduler", "scheduler.step() called on every iteration, skipped steps included",
              "scheduler_on_skipped_step", None, "step the scheduler only when the optimizer step was applied"),
)}


def reports(run: Run, name: str) -> bool:
    """Whether ``run``'s recorder reports what :data:`BROKEN_RUNS` says of the run ``name``: its ``kind``, at its
    ``where`` when the row names one."""
    row = BROKEN_RUNS[name]
    return any(f.kind == row.kind and (row.where is None or f.where == row.where) for f in run.findings())


def _finetune_objects(base: TinyGPT, size: Size, device, *, init_scale: float = 2.0**16):
    model = copy.deepcopy(base).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=size.lr / 3)
    scaler = torch.amp.GradScaler(device.type, init_scale=init_scale)
    return model, optimizer, scaler


def _data(model: TinyGPT, size: Size, device, steps: int | None = None, seed: int = 1) -> list:
    return list(batches(corpus().ids, batch=size.batch, block=model.config.block,
                        steps=size.finetune_steps if steps is None else steps, seed=seed, device=device))


def run_attention(recorder_factory, base: TinyGPT, *, fixed: bool = False, size: Size = LESSON_SIZE,
                  device="cpu") -> Run:
    """(a) Fine-tune in fp16 with grown attention logits: scores scaled after ``q @ kᵀ`` (``fixed``: SDPA)."""
    device = as_device("device", device)
    model, optimizer, scaler = _finetune_objects(base, size, device)
    data = _data(model, size, device)
    grow_attention_logits(model, data[0][0])
    model.set_attention("sdpa" if fixed else "scale_after")
    recorder = recorder_factory(model, optimizer, scaler)
    return train_steps(model, optimizer, data, dtype=torch.float16, scaler=scaler, recorder=recorder)


def run_unsafe_constant(recorder_factory, base: TinyGPT, *, fixed: bool = False, size: Size = LESSON_SIZE,
                        device="cpu") -> Run:
    """(b) Fine-tune in fp16 with a leftover static loss scale (``fixed``: without it)."""
    device = as_device("device", device)
    model, optimizer, scaler = _finetune_objects(base, size, device)
    recorder = recorder_factory(model, optimizer, scaler)
    data = _data(model, size, device, steps=None if fixed else size.collapse_steps)  # the fix: no collapse to wait for
    if fixed:
        return train_steps(model, optimizer, data, dtype=torch.float16, scaler=scaler, recorder=recorder)
    return train_steps_static_scale(model, optimizer, data, dtype=torch.float16, scaler=scaler, recorder=recorder)


def run_bf16_checkpoint(recorder_factory, base: TinyGPT, *, fixed: bool = False, size: Size = LESSON_SIZE,
                        device="cpu", dtype: torch.dtype | None = None) -> Run:
    """(c) Fine-tune a checkpoint with a grown MLP output in fp16 (``fixed``: in bf16, without a scaler).
    ``dtype`` overrides the choice (lesson 11 also shows the bf16 run of the same weights)."""
    device = as_device("device", device)
    dtype = dtype or (torch.bfloat16 if fixed else torch.float16)
    model, optimizer, scaler = _finetune_objects(base, size, device)
    data = _data(model, size, device)
    grow_mlp_output(model, data[0][0])
    scaler = scaler if dtype == torch.float16 else None
    recorder = recorder_factory(model, optimizer, scaler)
    return train_steps(model, optimizer, data, dtype=dtype, scaler=scaler, recorder=recorder)


SKIP_SCALE = 2.0**22
"""The scheduler run's initial loss scale: far too large, so its first steps overflow and are skipped."""


def run_scheduler(recorder_factory, base: TinyGPT, *, fixed: bool = False, size: Size = LESSON_SIZE,
                  device="cpu") -> Run:
    """(d) Fine-tune in fp16 with a linear-decay schedule and a first scale of 2**22 (the first steps are
    skipped): the scheduler stepped on every iteration (``fixed``: only on applied steps)."""
    device = as_device("device", device)
    model, optimizer, scaler = _finetune_objects(base, size, device, init_scale=SKIP_SCALE)
    steps = size.finetune_steps
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: max(0.0, 1 - step / steps))
    recorder = recorder_factory(model, optimizer, scaler, scheduler=scheduler)
    data = _data(model, size, device)
    if fixed:
        return train_steps(model, optimizer, data, dtype=torch.float16, scaler=scaler, scheduler=scheduler,
                           recorder=recorder)
    return train_steps_scheduler_every_step(model, optimizer, data, dtype=torch.float16, scaler=scaler,
                                            scheduler=scheduler, recorder=recorder)


# --- what to do with each finding ----------------------------------------------------------------------------

WHAT_TO_DO: dict[str, str] = {
    "overflow": "fix that module: SDPA for attention, bf16, or that module in FP32 (troubleshoot.FP32Island)",
    "nonfinite_input": "fix the data: a batch holds inf/NaN before the model runs",
    "nonfinite_loss": "fix the overflow it names, or compute the loss in FP32",
    "nonfinite_grad": "an inf/NaN gradient was applied (no scaler skips it): find where it starts, clip or fix it",
    "scale_collapse": "read its likely cause: a forward overflow, a loss too large for fp16, an unsafe constant",
    "frequent_skips": "lower the learning rate or clip (after unscale_); look for activations near 65504",
    "underflow": "let the scale grow (init_scale, growth_interval), normalise the loss or inputs, or use bf16",
    "low_headroom": "normalise what feeds the module, keep it in FP32, or use bf16 before it overflows",
    "unneeded_scaler": "drop the GradScaler: bf16 and fp32 have float32's range",
    "scheduler_on_skipped_step": "step the scheduler only when the scale did not go down",
    "optimizer_not_stepped": "call scaler.step(optimizer) before rec.step; with accumulation, rec.step on updates only",
    "healthy": "nothing to fix; keep the recorder with every=10 or more while you train",
}
"""Finding kind → the first thing to do (lesson 11's last section; one line per kind of the recorder)."""
