"""What ``ampcourse.recorder.AmpRecorder`` costs per training step, at ``every=1`` and ``every=10``.

A small decoder-only transformer of its own (token + position embeddings, causal self-attention, LayerNorm,
MLP; about 0.4 M parameters, the size of lesson 11's model) trains on random tokens: fp16 autocast + GradScaler
by default on CPU and CUDA (the case the 5 % claim is about: the recorder reads the scale every step; ``--dtype
bf16`` runs bf16 without a scaler). The same loop runs without a recorder and with one, in interleaved blocks (so
that a change of machine load hits every variant alike); each variant's time per step is the median over blocks
of (block time / steps), and a block is a multiple of 10 steps, so ``every=10`` pays for its sampled steps. The
verdict on the 5 % target at every=10 uses the per-block ratios (every=10 / no recorder, from the same round):
True only if the highest is within 5 %, False only if the lowest is above it, else not resolved.

    python benchmarks/recorder_overhead.py            # CPU: 7 rounds of 3 blocks of 10 steps
    python benchmarks/recorder_overhead.py --device cuda

Not a timed test: a measurement, noisy on a busy machine (the numbers print with the block spread).
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import torch
from torch import nn

from ampcourse.recorder import AmpRecorder

VOCAB, D_MODEL, HEADS, LAYERS, SEQ, BATCH = 96, 128, 4, 2, 64, 16


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D_MODEL), nn.LayerNorm(D_MODEL)
        self.qkv, self.proj = nn.Linear(D_MODEL, 3 * D_MODEL), nn.Linear(D_MODEL, D_MODEL)
        self.mlp = nn.Sequential(nn.Linear(D_MODEL, 4 * D_MODEL), nn.GELU(), nn.Linear(4 * D_MODEL, D_MODEL))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, HEADS, D_MODEL // HEADS).permute(2, 0, 3, 1, 4)
        att = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, D_MODEL))
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(VOCAB, D_MODEL), nn.Embedding(SEQ, D_MODEL)
        self.blocks = nn.Sequential(*[Block() for _ in range(LAYERS)])
        self.ln, self.head = nn.LayerNorm(D_MODEL), nn.Linear(D_MODEL, VOCAB)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        return self.head(self.ln(self.blocks(x)))


def make_run(device: str, dtype: torch.dtype):
    torch.manual_seed(0)
    model = TinyGPT().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler(device, enabled=dtype == torch.float16)
    data = torch.randint(0, VOCAB, (BATCH, SEQ + 1), generator=torch.Generator().manual_seed(0)).to(device)
    x, y = data[:, :-1], data[:, 1:]

    def step() -> torch.Tensor:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device_type=device, dtype=dtype):
            loss = nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        return loss

    return model, optimizer, scaler, step


def block_time(device: str, step, rec: AmpRecorder | None, steps: int) -> float:
    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        loss = step()
        if rec is not None:
            rec.step(loss)
        else:
            float(loss.detach())  # the recorder reads the loss each step: so does the baseline (a loop logs its loss)
    if device == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--dtype", default="fp16", choices=["bf16", "fp16"])
    parser.add_argument("--blocks", type=int, default=7, help="rounds of interleaved blocks (>= 3)")
    parser.add_argument("--steps", type=int, default=10, help="steps per block (a multiple of 10)")
    args = parser.parse_args()
    if args.blocks < 3:
        parser.error("--blocks must be >= 3: the verdict needs a spread of per-block ratios")
    if args.steps % 10:
        parser.error("--steps must be a multiple of 10, so every=10 samples the same share in each block")
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype or "fp16"]
    model, optimizer, scaler, step = make_run(args.device, dtype)
    print(f"TinyGPT: {sum(p.numel() for p in model.parameters()):,} parameters, batch {BATCH}×{SEQ}, "
          f"{str(dtype).removeprefix('torch.')} autocast on {args.device}, {torch.get_num_threads()} CPU threads")
    for _ in range(5):  # warm-up
        step()
    variants = {"no recorder": None, "every=1": 1, "every=10": 10}
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(args.blocks):
        for name, every in variants.items():
            rec = None if every is None else AmpRecorder(model, optimizer, scaler, every=every)
            times[name].append(block_time(args.device, step, rec, args.steps))
            if rec is not None:
                rec.detach()
    base = statistics.median(times["no recorder"])
    spreads = {}
    for name, values in times.items():
        median = statistics.median(values)
        spreads[name] = (max(values) - min(values)) / 2 / median if median else math.nan
        overhead = "" if name == "no recorder" else f"  overhead {100 * (median / base - 1):+.1f} %"
        print(f"{name:12s} {1000 * median:8.2f} ms/step  (blocks spread ±{100 * spreads[name]:.0f} %){overhead}")
    ratios = sorted(t10 / t0 - 1 for t10, t0 in zip(times["every=10"], times["no recorder"], strict=True))
    low, high = ratios[0], ratios[-1]
    print(f"every=10 overhead per block (same round): {100 * low:+.1f} % to {100 * high:+.1f} % "
          f"(median {100 * statistics.median(ratios):+.1f} %, {len(ratios)} blocks)")
    if high <= 0.05:
        print("every=10 within the 5 % target: True (in every block)")
    elif low > 0.05:
        print("every=10 within the 5 % target: False (in every block)")
    else:
        print("every=10 against the 5 % target: not resolved on this machine now (the blocks straddle 5 %)")
    # A sampled step costs what every=1 adds per step; every=10 pays it once in 10 steps. The other 9 steps'
    # own cost (reading the scale, the step hook, opening the probe) is left out: a lower bound, no verdict.
    estimate = (statistics.median(times["every=1"]) / base - 1) / 10
    print(f"every=10 from every=1's cost per sampled step: at least {100 * estimate:+.1f} % (a lower bound: the "
          "unsampled steps' own cost is not in it)")


if __name__ == "__main__":
    main()
