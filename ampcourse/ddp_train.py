"""The script each rank runs under torchrun (lesson 08): ``torchrun --nproc-per-node 2 -m ampcourse.ddp_train RUN_DIR``.

It reads ``RUN_DIR/config.json`` (a :class:`ampcourse.distributed.RunConfig`) and, by ``config.mode``:

* ``ddp`` — the lesson's run: ``DistributedDataParallel`` around the tiny model, one ``GradScaler`` per process,
  :func:`ampcourse.distributed.train_windows` (``no_sync`` for all but the last micro-batch of a window,
  ``unscale_`` + clipping), a DDP communication hook that counts the gradient all-reduces, and a JSON record per
  window: scale, skipped, local loss, clip norm, all-reduces, parameter hash. Then two short epilogues on the
  trained model: one window *without* ``no_sync`` (counting its all-reduces, no step), and a deliberate desync
  (an inf put into rank ``inf_rank``'s gradients *after* the all-reduce: only that rank skips).
* ``fsdp`` (or ``ddp`` with ``fsdp_after``) — FSDP2 (``fully_shard``) with a ``MixedPrecisionPolicy``: which
  dtypes the parameters, gradients and outputs have, a few training steps, and a float16 + ``GradScaler`` step
  with an inf in one rank's gradient shard only.
* ``user`` — an exercise check: ``RUN_DIR/user_fn.py`` holds the learner's function; it is executed in a fresh
  namespace (``torch``, ``nn``, ``F``, ``math``, ``contextlib`` are provided — the function must be
  self-contained) and called on the DDP-wrapped model; the optimizer's step hooks record what it steps with.

Every rank writes ``RUN_DIR/rank{r}.jsonl``; an exception is logged there (type, message, traceback) and re-raised,
so torchrun reports the failure and :func:`ampcourse.distributed.launch` can name the rank.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import json
import math
import os
import time
import traceback
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn import functional as F

from .distributed import (
    DTYPES,
    RunConfig,
    flat_params,
    make_model,
    make_scaler,
    param_hash,
    pick_backend,
    train_windows,
    window_batches,
)


class RankLog:
    """Append JSON records to ``rank{r}.jsonl``, flushed at once (a killed rank keeps what it wrote)."""

    def __init__(self, path: Path, rank: int) -> None:
        self.path, self.rank = path, rank

    def write(self, event: str, **fields: Any) -> None:
        with open(self.path, "a", encoding="utf-8") as out:
            out.write(json.dumps({"event": event, "rank": self.rank, "time": time.time(), **fields}) + "\n")


def _finite(x: float) -> float | str:
    return x if math.isfinite(x) else str(x)


def _device(config: RunConfig, local_rank: int) -> torch.device:
    if config.device == "cuda":
        device = torch.device("cuda", local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
        return device
    return torch.device("cpu")


class AllReduceCounter:
    """Counts gradient all-reduces: :meth:`hook` is a DDP communication hook (one call per bucket) that counts,
    records what the bucket holds (``bucket.buffer()``: its dtype and bytes — what goes over the wire), then
    does DDP's default all-reduce (``allreduce_hook``: sum over ranks, divided by the world size)."""

    def __init__(self) -> None:
        self.calls = 0
        self.buffer_dtype: str | None = None
        self.buffer_bytes = 0

    def hook(self, state, bucket):
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

        self.calls += 1
        buffer = bucket.buffer()
        self.buffer_dtype, self.buffer_bytes = str(buffer.dtype), buffer.numel() * buffer.element_size()
        return allreduce_hook(state, bucket)


def _wrap_ddp(model: nn.Module, device: torch.device) -> tuple[nn.Module, AllReduceCounter]:
    from torch.nn.parallel import DistributedDataParallel as DDP

    ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    counter = AllReduceCounter()
    ddp.register_comm_hook(None, counter.hook)
    return ddp, counter


def run_ddp(config: RunConfig, rank: int, device: torch.device, log: RankLog) -> None:
    model = make_model(config).to(device)
    ddp, counter = _wrap_ddp(model, device)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=config.lr)
    scaler = make_scaler(config)
    batches = window_batches(config, rank, device)

    seen = {"allreduces": 0}

    def on_window(k: int, info: dict[str, Any]) -> None:
        count, seen["allreduces"] = counter.calls - seen["allreduces"], counter.calls
        log.write("window", **{**info, "loss": _finite(info["loss"]), "grad_norm": _finite(info["grad_norm"])},
                  allreduces=count, checksum=float(flat_params(model).sum()),
                  hash=param_hash(model), bucket_dtype=counter.buffer_dtype, bucket_bytes=counter.buffer_bytes)

    train_windows(ddp, optimizer, scaler, batches, config.accum_steps, config.max_norm,
                  dtype=config.torch_dtype, on_window=on_window)
    log.write("final", params=flat_params(model).tolist(), hash=param_hash(model), scale=scaler.get_scale(),
              allreduces=counter.calls)

    # Epilogue 1: one window of backward passes WITHOUT no_sync — every micro-batch all-reduces. No step.
    before = counter.calls
    for x, y in batches[:config.accum_steps]:
        with torch.autocast(device.type, dtype=config.torch_dtype, enabled=config.torch_dtype != torch.float32):
            loss = F.mse_loss(ddp(x).float(), y) / config.accum_steps
        scaler.scale(loss).backward()
    log.write("no_sync_off", micro_batches=config.accum_steps, allreduces=counter.calls - before)
    optimizer.zero_grad(set_to_none=True)

    # Epilogue 2: an inf put into ONE rank's gradients after the all-reduce. GradScaler does not communicate:
    # that rank skips, the other steps, and the replicas are no longer identical.
    x, y = batches[0]
    scale = scaler.get_scale()
    with torch.autocast(device.type, dtype=config.torch_dtype, enabled=config.torch_dtype != torch.float32):
        loss = F.mse_loss(ddp(x).float(), y)
    scaler.scale(loss).backward()
    if rank == config.inf_rank:
        with torch.no_grad():
            next(iter(model.parameters())).grad.view(-1)[0] = math.inf
    scaler.step(optimizer)
    scaler.update()
    log.write("desync", skipped=scaler.get_scale() < scale, scale=scale, scale_after=scaler.get_scale(),
              hash=param_hash(model))


def run_fsdp(config: RunConfig, rank: int, device: torch.device, log: RankLog) -> None:
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    if device.type == "cuda" and dist.get_backend() != "nccl":
        device = torch.device("cpu")  # gloo cannot all-gather / reduce-scatter CUDA tensors: FSDP stays on the CPU
    log.write("fsdp_start", device=str(device), backend=dist.get_backend())
    policy = MixedPrecisionPolicy(param_dtype=DTYPES[config.fsdp_dtype], reduce_dtype=torch.float32)
    model = make_model(config).to(device)
    seen: dict[str, str] = {}

    def pre_hook(module, args):
        seen["weight in forward"] = str(module.weight.dtype)
        seen["input in forward"] = str(args[0].dtype)

    model[0].register_forward_pre_hook(pre_hook)
    for layer in (model[0], model[2]):
        fully_shard(layer, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    optimizer = torch.optim.SGD(model.parameters(), lr=config.lr)
    # Clean data: this part has no GradScaler (bf16), so an injected inf would reach the weights.
    batches = window_batches(dataclasses.replace(config, inf_window=None), rank, device)
    weight = model[0].weight
    for k, start in enumerate(range(0, len(batches), config.accum_steps)):
        window = batches[start:start + config.accum_steps]
        optimizer.zero_grad(set_to_none=True)
        total = 0.0
        for i, (x, y) in enumerate(window):
            # FSDP2's no_sync: skip the reduce-scatter for all but the last micro-batch of the window.
            model.set_requires_gradient_sync(i == len(window) - 1)
            out = model(x)
            loss = F.mse_loss(out.float(), y) / len(window)
            loss.backward()
            total += loss.item()
        if k == 0:
            log.write("fsdp_dtypes", policy=repr(policy), parameter_type=type(weight).__name__,
                      stored_param=str(weight.dtype), full_shape=list(weight.shape),
                      local_shape=list(weight.to_local().shape), output=str(out.dtype),
                      grad=str(weight.grad.dtype), grad_local_shape=list(weight.grad.to_local().shape), **seen)
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.max_norm)
        optimizer.step()
        log.write("fsdp_window", window=k, loss=total)

    # float16 + GradScaler under FSDP2: an inf in ONE rank's gradient shard. The inf check on sharded (DTensor)
    # gradients is all-reduced (max) across ranks, so every rank skips.
    model16 = make_model(config).to(device)
    fully_shard(model16, mp_policy=MixedPrecisionPolicy(param_dtype=torch.float16, reduce_dtype=torch.float32))
    optimizer16 = torch.optim.SGD(model16.parameters(), lr=config.lr)
    # The scaler lives where the gradients are (the demo may run on the CPU while config.device is "cuda").
    scaler = torch.amp.GradScaler(device.type, init_scale=config.init_scale, growth_interval=config.growth_interval)
    x, y = batches[0]
    scaler.scale(F.mse_loss(model16(x).float(), y)).backward()
    shard = next(iter(model16.parameters())).grad.to_local()
    if rank == config.inf_rank and shard.numel():
        shard.view(-1)[0] = math.inf
    local_finite = bool(torch.isfinite(shard).all())
    scale = scaler.get_scale()
    scaler.step(optimizer16)
    scaler.update()
    log.write("fsdp_inf_shard", local_shard_finite=local_finite, scale=scale, scale_after=scaler.get_scale(),
              skipped=scaler.get_scale() < scale)


class _StepSpy:
    """Records, at each real ``optimizer.step()``, the parameters before it and the gradients it steps with."""

    def __init__(self, optimizer: torch.optim.Optimizer, model: nn.Module, counter: AllReduceCounter) -> None:
        self.records: list[dict[str, Any]] = []
        self.model, self.counter = model, counter
        optimizer.register_step_pre_hook(self._pre)

    def _pre(self, optimizer, args, kwargs) -> None:
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in self.model.parameters()]
        flat = torch.cat([g.detach().reshape(-1).to("cpu", torch.float64) for g in grads])
        self.records.append({"params": flat_params(self.model).tolist(), "grads": flat.tolist(),
                             "allreduces": self.counter.calls})


def run_user(config: RunConfig, rank: int, device: torch.device, log: RankLog, run_dir: Path) -> None:
    source = (run_dir / "user_fn.py").read_text(encoding="utf-8")
    namespace: dict[str, Any] = {"torch": torch, "nn": nn, "F": F, "math": math, "contextlib": contextlib,
                                 "__name__": "learner"}
    exec(compile(source, "<your function>", "exec"), namespace)  # noqa: S102 - the learner's own function
    fn = namespace[config.user_fn]
    model = make_model(config).to(device)
    ddp, counter = _wrap_ddp(model, device)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=config.lr)
    spy = _StepSpy(optimizer, model, counter)
    scaler = make_scaler(config)
    fn(ddp, F.mse_loss, optimizer, scaler, window_batches(config, rank, device), config.accum_steps,
       config.max_norm)
    log.write("user_done", steps=spy.records, params=flat_params(model).tolist(), hash=param_hash(model),
              allreduces=counter.calls, scale=scaler.get_scale())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="ampcourse.ddp_train", description=__doc__.split("\n")[0])
    parser.add_argument("run_dir", type=Path, help="the run directory holding config.json")
    run_dir = parser.parse_args(argv).run_dir
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    log = RankLog(run_dir / f"rank{rank}.jsonl", rank)
    try:
        config = RunConfig.from_json((run_dir / "config.json").read_text())
        world = int(os.environ.get("WORLD_SIZE", "1"))
        if world != config.world_size:
            raise ValueError(f"torchrun started {world} processes but the config says world_size = "
                             f"{config.world_size}")
        backend, why = pick_backend(config.device, world)
        device = _device(config, local_rank)
        log.write("start", pid=os.getpid(), backend=backend, why=why, device=str(device), world_size=world,
                  torch=torch.__version__)
        if config.fail_rank == rank:
            raise ValueError(f"deliberate failure on rank {rank} (the config says fail_rank = {rank})")
        torch.manual_seed(config.seed)
        dist.init_process_group(backend, timeout=datetime.timedelta(seconds=config.collective_timeout))
        if config.mode == "ddp":
            run_ddp(config, rank, device, log)
            if config.fsdp_after:
                run_fsdp(config, rank, device, log)
        elif config.mode == "fsdp":
            run_fsdp(config, rank, device, log)
        else:
            run_user(config, rank, device, log, run_dir)
        # Leave together: a rank that tears down gloo while its peer still uses the connection can make the
        # peer abort (SIGABRT, seen once in CI). Only on success: after an error the peer may never arrive.
        dist.barrier()
        log.write("done")
    except BaseException as error:
        log.write("error", type=type(error).__name__, message=str(error), traceback=traceback.format_exc())
        raise
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


if __name__ == "__main__":
    main()
