"""Lesson 08: the launcher, the real 2-process DDP + AMP run under torchrun, and its single-process reference.

The launches are real (gloo, two CPU processes): each takes several seconds on a small CPU, so the main run is
launched once (module fixture) and every property of it is asserted from its logs.
"""

import json
import math
import os
from pathlib import Path

import pytest
import torch

from ampcourse import distributed as d
from ampcourse.distributed import LaunchFailed, LaunchTimeout, RunConfig

CONFIG = RunConfig(windows=6, accum_steps=2, inf_window=3, inf_rank=1)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("ddp")
    CONFIG.write(run_dir)
    return d.launch("ampcourse.ddp_train", nproc=2, args=[str(run_dir)], run_dir=run_dir, timeout=300)


@pytest.fixture(scope="module")
def reference():
    return d.train_single_process(CONFIG)


def test_ddp_run_matches_the_single_process_run(run, reference, figures):
    params = torch.tensor(run.one(0, "final")["params"], dtype=torch.float64)
    comparison = d.compare_params(params, reference.params, d.param_tolerance(CONFIG))
    assert comparison.ok, str(comparison)
    assert comparison.max_diff > 0  # float16 rounding differs between half batches and the full batch
    assert run.one(0, "final")["hash"] == run.one(1, "final")["hash"]  # the replicas agree bit for bit
    figures(f"lesson 08 DDP (2 gloo ranks, fp16) vs single process: {comparison}; launch {run.seconds:.1f} s")


def test_fp32_single_process_runs_agree_closely_with_the_tolerance_formula():
    fp32 = RunConfig(windows=2, dtype="float32")
    assert d.param_tolerance(fp32) == pytest.approx(2 * 0.2 * 1.0 * torch.finfo(torch.float32).eps)
    a, b = d.train_single_process(fp32), d.train_single_process(fp32)
    assert torch.equal(a.params, b.params) and a.param_hash == b.param_hash  # deterministic


def test_one_allreduce_per_window_with_no_sync(run):
    for rank in (0, 1):
        windows = run.events(rank, "window")
        assert [w["allreduces"] for w in windows] == [1] * CONFIG.windows
        assert run.one(rank, "no_sync_off")["allreduces"] == CONFIG.accum_steps


def test_ddp_all_reduces_float32_gradients_under_autocast(run):
    # autocast leaves the parameters, hence their gradients, in float32: the bucket DDP sends is float32
    # (no "communication halves" without a compression hook)
    n_params = sum(p.numel() for p in d.make_model(CONFIG).parameters())
    for rank in (0, 1):
        for w in run.events(rank, "window"):
            assert w["bucket_dtype"] == "torch.float32" and w["bucket_bytes"] == 4 * n_params


def test_scale_and_skips_agree_on_every_rank_and_with_the_reference(run, reference):
    per_rank = [[(w["scale"], w["skipped"]) for w in run.events(rank, "window")] for rank in (0, 1)]
    assert per_rank[0] == per_rank[1] == [(r["scale"], r["skipped"]) for r in reference.records]
    skipped = [w["window"] for w in run.events(0, "window") if w["skipped"]]
    assert skipped == [CONFIG.inf_window]  # the inf was on rank 1 only; rank 0 skipped too
    assert math.isfinite(run.events(0, "window")[CONFIG.inf_window]["loss"])  # rank 0's own data was clean
    assert len({w["scale"] for w in run.events(0, "window")}) > 1  # the scale moved (growth and backoff)


def test_an_inf_injected_after_the_allreduce_desyncs_the_ranks(run):
    desync = {rank: run.one(rank, "desync") for rank in (0, 1)}
    assert desync[CONFIG.inf_rank]["skipped"] and not desync[1 - CONFIG.inf_rank]["skipped"]
    assert desync[0]["hash"] != desync[1]["hash"]


def test_a_failing_rank_raises_a_readable_launch_failed(tmp_path):
    RunConfig(fail_rank=1).write(tmp_path)
    with pytest.raises(LaunchFailed, match=r"^rank 1 failed: ValueError: deliberate failure on rank 1") as info:
        d.launch("ampcourse.ddp_train", args=[str(tmp_path)], run_dir=tmp_path, timeout=300)
    assert info.value.rank == 1 and info.value.error_type == "ValueError"
    assert "last lines of rank 1's traceback" in str(info.value)
    assert (tmp_path / "torchrun.log").read_text()  # torchrun's noise went to a file


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "Z" not in Path(f"/proc/{pid}/stat").read_text().split(")")[1][:3]


def test_timeout_kills_the_whole_process_tree(tmp_path):
    script = tmp_path / "sleeper.py"
    script.write_text("import os, pathlib, time\n"
                      "folder = pathlib.Path(os.environ['SLEEPER_DIR'])\n"
                      "(folder / f\"pid{os.environ['RANK']}\").write_text(str(os.getpid()))\n"
                      "time.sleep(600)\n")
    env = {**os.environ, "SLEEPER_DIR": str(tmp_path)}
    with pytest.raises(LaunchTimeout, match=r"did not finish within 12 s: killed its process tree"):
        # The workers start after torchrun has imported torch: wait until both wrote their pid, then time out.
        d.launch(script, nproc=2, run_dir=tmp_path / "run", timeout=12, env=env)
    pids = [int(p.read_text()) for p in tmp_path.glob("pid*")]
    assert len(pids) == 2, "the workers did not start within the timeout; the machine is very slow"
    assert not any(_alive(pid) for pid in pids)


def test_launch_failed_without_rank_logs_shows_torchrun_output(tmp_path):
    script = tmp_path / "crash.py"
    script.write_text("import sys\nsys.exit(3)\n")
    with pytest.raises(LaunchFailed, match="no rank logged an error"):
        d.launch(script, nproc=1, run_dir=tmp_path / "run", timeout=120)


def test_torchelastic_writes_its_logs_in_the_run_folder_not_in_tmpdir(tmp_path):
    """Audit r3, finding 30: every launch left ``$TMPDIR/torchelastic_<random>/`` behind. With ``--log-dir``
    torchelastic writes inside the run folder; after a run that succeeded that folder is removed, after a failed
    one it stays there (its error files), and nothing lands in ``$TMPDIR`` either way."""
    tmpdir = tmp_path / "tmpdir"
    tmpdir.mkdir()
    env = {**os.environ, "TMPDIR": str(tmpdir)}
    (tmp_path / "ok.py").write_text("print('fine')\n")
    (tmp_path / "crash.py").write_text("import sys\nsys.exit(3)\n")
    result = d.launch(tmp_path / "ok.py", nproc=1, run_dir=tmp_path / "ok", timeout=120, env=env)
    assert result.returncode == 0 and "--log-dir" in result.command
    assert not (tmp_path / "ok" / d.ELASTIC_LOG_DIR).exists()
    with pytest.raises(LaunchFailed):
        d.launch(tmp_path / "crash.py", nproc=1, run_dir=tmp_path / "crash", timeout=120, env=env)
    assert (tmp_path / "crash" / d.ELASTIC_LOG_DIR).is_dir()
    assert [p.name for p in tmpdir.iterdir() if p.name.startswith("torchelastic_")] == []


def test_read_rank_logs_ignores_a_torn_last_line(tmp_path):
    (tmp_path / "rank0.jsonl").write_text(json.dumps({"event": "start"}) + "\n{\"event\": \"win")
    (tmp_path / "rank1.jsonl").write_text("")
    assert d.read_rank_logs(tmp_path) == {0: [{"event": "start"}], 1: []}


def test_free_port_is_bindable():
    import socket

    port = d.free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))
    assert 0 < port < 65536


def test_pick_backend():
    assert d.pick_backend("cpu", 2)[0] == "gloo"
    backend, why = d.pick_backend("cuda", 2)
    assert backend == ("nccl" if torch.cuda.device_count() >= 2 else "gloo") and "rank" in why
    with pytest.raises(ValueError, match="device_type"):
        d.pick_backend("tpu", 2)


def test_data_split_across_ranks_is_the_global_batch():
    config = RunConfig(world_size=2, micro_batch_size=3)
    x, y = d.micro_batch(config, 5)
    parts = [d.micro_batch(config, 5, rank) for rank in (0, 1)]
    assert torch.equal(torch.cat([p[0] for p in parts]), x) and torch.equal(torch.cat([p[1] for p in parts]), y)
    assert config.global_batch == 2 * 2 * 3


def test_compare_params():
    a = torch.zeros(4)
    result = d.compare_params(a, a + 1e-7, 1e-6)
    assert result.ok and not result.bit_identical and "≤ 1.00e-06" in str(result)  # 3 digits: 1.17e-03 is not 1e-03
    assert not d.compare_params(a, a + 1e-3, 1e-6).ok
    with pytest.raises(ValueError, match="same shape"):
        d.compare_params(a, torch.zeros(3), 1e-6)


@pytest.mark.parametrize(("kwargs", "error", "words"), [
    ({"windows": 0}, ValueError, "windows"),
    ({"dtype": "float8"}, ValueError, "dtype"),
    ({"device": "mps"}, ValueError, "device"),
    ({"inf_window": 9}, ValueError, "inf_window"),
    ({"inf_rank": 2}, ValueError, "inf_rank"),
    ({"lr": "0.1"}, TypeError, "lr"),
    ({"mode": "tp"}, ValueError, "mode"),
])
def test_config_validates_its_arguments(kwargs, error, words):
    with pytest.raises(error, match=words):
        RunConfig(**kwargs)


def test_config_round_trips_through_json(tmp_path):
    config = RunConfig(inf_window=2, fail_rank=1)
    assert RunConfig.from_json(config.write(tmp_path).read_text()) == config


def test_launch_validates_its_arguments(tmp_path):
    with pytest.raises(ValueError, match="nproc"):
        d.launch("ampcourse.ddp_train", nproc=0, run_dir=tmp_path)
    with pytest.raises(TypeError, match="args"):
        d.launch("ampcourse.ddp_train", args="x", run_dir=tmp_path)
    with pytest.raises(ValueError, match="timeout"):
        d.launch("ampcourse.ddp_train", timeout=0, run_dir=tmp_path)




def test_a_crash_in_teardown_after_every_rank_finished_is_not_a_failure(tmp_path):
    """gloo can abort a rank while it closes its connections after the final barrier (seen in CI): the run's
    work and logs are complete then, so only a rank that did not log ``done``, or logged an error, fails it."""
    from ampcourse.distributed import RunResult, _finished_then_crashed_in_teardown

    def result(logs):
        return RunResult(1, logs, tmp_path, 1.0, ("torchrun",))

    done = {"event": "done"}
    assert _finished_then_crashed_in_teardown(result({0: [done], 1: [done]}), 2)
    assert not _finished_then_crashed_in_teardown(result({0: [done], 1: []}), 2)
    assert not _finished_then_crashed_in_teardown(result({0: [done], 1: [{"event": "error"}, done]}), 2)
    assert not _finished_then_crashed_in_teardown(result({0: [done]}), 2)


def test_fsdp_accumulates_in_param_dtype_unless_reduce_dtype_is_set():
    """Lesson 08's sentence on FSDP2's reduce_dtype (torch's MixedPrecisionPolicy docstring), run."""
    from ampcourse.distributed import fsdp_accumulation_dtypes

    dtypes = fsdp_accumulation_dtypes()
    assert dtypes["None"] == {"accumulated": torch.bfloat16, "sharded grad": torch.float32}
    assert dtypes["float32"] == {"accumulated": torch.float32, "sharded grad": torch.float32}
    with pytest.raises(ValueError, match="micro_batches"):
        fsdp_accumulation_dtypes(micro_batches=0)
