"""The GPU check: one command that runs the whole course on a CUDA machine and writes a report.

    python -m ampcourse gpucheck            # on a CUDA machine (about 5 minutes on an H200)
    python -m ampcourse gpucheck --cpu      # dry run of the same steps on the CPU

It runs, in order:

1. every lesson and every solution notebook under ``pytest --nbval`` (strict): a cell that raises
   fails the check; a cell whose output differs from the stored (CPU-made) output is listed, not
   failed, because many outputs honestly depend on the device (its name, its dtype, its timings);
2. the package tests marked ``gpu`` (``pytest -m gpu tests``), which skip without CUDA;
3. the lesson-06 benchmark (:func:`ampcourse.bench.compare_precisions`) at sizes that fill a GPU,
   plus matrix-product throughput per dtype against the datasheet peak;

and writes ``reports/gpu-check-<device>.md`` (and ``.json``): device, versions, pass/fail per
notebook, the speed-up and memory table. The exit code is 0 when no cell raised, the GPU tests
passed and the benchmark ran.

It needs only torch, numpy, matplotlib, pytest and the notebook packages (nbval, nbclient,
nbformat, ipykernel, ipywidgets), so it also runs where the course is not pip-installed: with the
repository root on ``PYTHONPATH`` (CONTRIBUTING.md says how to carry the wheels to a lent GPU
machine).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .course import ROOT

#: Benchmark sizes: (width, depth, batch) of the lesson-06 MLP, and the square matmul size.
SIZES = {
    "cuda": {"width": 8192, "depth": 8, "batch": 8192, "matmul": 8192},
    "cpu": {"width": 256, "depth": 2, "batch": 128, "matmul": 512},
}


@dataclass
class NotebookResult:
    """One notebook under nbval: its cells, the ones that raised and the ones whose output differs."""

    path: str
    cells: int = 0
    errors: list[str] = field(default_factory=list)
    differs: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def status(self) -> str:
        if self.errors:
            return "FAILED"
        return "passed (outputs differ)" if self.differs else "passed"


def _run(cmd: list[str], env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def _junit_cases(path: Path) -> list[ET.Element]:
    if not path.exists():
        return []
    return list(ET.parse(path).getroot().iter("testcase"))


def _is_execution_error(case: ET.Element) -> bool:
    """nbval marks a cell that raised differently from one whose output merely differs."""
    for failure in list(case.iter("failure")) + list(case.iter("error")):
        text = (failure.get("message") or "") + (failure.text or "")
        if "outputs differ" in text.lower() or "mismatch" in text.lower():
            return False
        return True
    return False


def parse_nbval_junit(path: Path) -> list[NotebookResult]:
    """Group nbval's per-cell JUnit cases by notebook (``classname`` is ``folder.name.ipynb``)."""
    results: dict[str, NotebookResult] = {}
    for case in _junit_cases(path):
        classname = case.get("classname", "").removesuffix(".ipynb")
        key = classname.replace(".", "/") + ".ipynb"  # the course's notebook names hold no dots
        result = results.setdefault(key, NotebookResult(key))
        result.cells += 1
        result.seconds += float(case.get("time", 0.0))
        failed = list(case.iter("failure")) + list(case.iter("error"))
        if failed:
            (result.errors if _is_execution_error(case) else result.differs).append(case.get("name", "?"))
    return sorted(results.values(), key=lambda r: r.path)


def _xdist_args(cpu: bool) -> list[str]:
    """Run notebooks four at a time on a GPU machine when pytest-xdist is there (one kernel per file)."""
    if cpu:
        return []
    try:
        import xdist  # noqa: F401
    except ImportError:
        return []
    return ["-n", "4", "--dist", "loadfile"]


def run_notebooks(env: dict[str, str], cpu: bool, timeout: float) -> tuple[list[NotebookResult], str]:
    with tempfile.TemporaryDirectory() as tmp:
        junit = Path(tmp) / "nbval.xml"
        cmd = [sys.executable, "-m", "pytest", "--nbval", "notebooks", "solutions", "-q", "-p", "no:cacheprovider",
               "--nbval-cell-timeout=600", f"--junitxml={junit}", *_xdist_args(cpu)]
        proc = _run(cmd, env, timeout)
        return parse_nbval_junit(junit), proc.stdout[-3000:] + proc.stderr[-2000:]


def run_gpu_tests(env: dict[str, str], timeout: float) -> tuple[dict[str, int], str]:
    with tempfile.TemporaryDirectory() as tmp:
        junit = Path(tmp) / "gpu.xml"
        cmd = [sys.executable, "-m", "pytest", "-m", "gpu", "tests", "-q", "-p", "no:cacheprovider",
               f"--junitxml={junit}"]
        proc = _run(cmd, env, timeout)
        counts = {"passed": 0, "failed": 0, "skipped": 0}
        failed_names = []
        for case in _junit_cases(junit):
            if list(case.iter("failure")) or list(case.iter("error")):
                counts["failed"] += 1
                failed_names.append(case.get("name", "?"))
            elif list(case.iter("skipped")):
                counts["skipped"] += 1
            else:
                counts["passed"] += 1
        tail = proc.stdout[-3000:]
        if proc.returncode not in (0, 5) and not counts["failed"]:
            counts["failed"] = 1  # pytest itself broke (collection error): show its output
        return counts, tail


def run_benchmark(device_type: str) -> dict:
    """The lesson-06 comparison at GPU-filling sizes (small ones on the CPU) and matmul throughput."""
    import torch

    from . import bench

    device = torch.device(device_type)
    sizes = SIZES["cuda" if device_type == "cuda" else "cpu"]
    # One compiled row (the recommended bf16) on CUDA: lesson 06 already compiles every mode, and each
    # compilation at these sizes costs tens of seconds of the check's 8-minute budget.
    compile_options = (False, True) if device_type == "cuda" else (False,)
    comparison = bench.compare_precisions(width=sizes["width"], depth=sizes["depth"], batch=sizes["batch"],
                                          device=device, compile=compile_options, compile_modes=("bf16",),
                                          warmup=3, repeats=3, rounds=4)  # 12 timed steps per row, interleaved
    matmuls = []
    n = sizes["matmul"]
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        if device_type == "cpu" and dtype == torch.float16:
            n_used = 128  # CPU float16 matrix products take a slow path: keep it tiny
        else:
            n_used = n
        a = torch.randn(n_used, n_used, device=device, dtype=dtype)
        b = torch.randn(n_used, n_used, device=device, dtype=dtype)
        timing = bench.time_fn(lambda a=a, b=b: a @ b, warmup=3, repeats=10, device=device)
        achieved = bench.achieved_flops(bench.matmul_flops(n_used, n_used, n_used), timing.median)
        peak = bench.peak_flops(device, dtype)
        row = {"dtype": str(dtype).removeprefix("torch."), "n": n_used, "time": str(timing),
               "TFLOP/s": achieved / 1e12}
        if peak is not None:
            row["fraction of peak"] = bench.fraction_of_peak(achieved, peak[0])
            row["peak source"] = peak[1]
        matmuls.append(row)
        del a, b
    return {"sizes": sizes, "table": str(comparison.table()), "noise": comparison.warning, "matmuls": matmuls}


#: The lesson-10 row: a stack of square linears, large enough that FP8 matrix products can pay for the casts.
FP8_SIZES = {"cuda": {"width": 8192, "depth": 4, "batch": 8192}, "cpu": {"width": 64, "depth": 2, "batch": 64}}


def fp8_speed_row(device_type: str, *, dry_run: bool = False, compile: bool | None = None,
                  repeats: int = 10) -> dict:
    """bf16 autocast vs torchao FP8 (``Float8Linear`` + bf16 autocast) forward+backward step time.

    Runs only on a CUDA GPU with FP8 Tensor Cores (compute capability >= 8.9); elsewhere it returns
    ``{"skipped": reason}`` — unless ``dry_run``, which runs the same code at tiny sizes with emulated FP8 (the
    CPU dry run, and the unit test of this code path). ``compile`` (default: on CUDA) wraps both models in
    ``torch.compile``: torchao's FP8 is fast only with its casts fused.
    """
    import torch
    from torch import nn

    from . import bench
    from .fp8 import fp8_tensor_cores, to_float8

    device = torch.device(device_type)
    if not dry_run and not fp8_tensor_cores(device):
        if device.type != "cuda":
            return {"skipped": f"no FP8 Tensor Cores on {device.type} (a CUDA GPU of compute capability >= 8.9)"}
        major, minor = torch.cuda.get_device_capability(device)
        return {"skipped": f"compute capability {major}.{minor} < 8.9: no FP8 Tensor Cores"}
    sizes = FP8_SIZES["cuda" if device.type == "cuda" and not dry_run else "cpu"]
    compile = device.type == "cuda" if compile is None else compile
    width, depth, batch = sizes["width"], sizes["depth"], sizes["batch"]
    x = torch.randn(batch, width, device=device)
    times = {}
    for name in ("bf16", "fp8"):
        torch.manual_seed(0)
        model = nn.Sequential(*[nn.Linear(width, width, bias=False) for _ in range(depth)]).to(device)
        if name == "fp8":
            to_float8(model, device)
        run = torch.compile(model) if compile else model

        def step(run=run, model=model):
            with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
                loss = run(x).float().square().mean()
            loss.backward()
            model.zero_grad(set_to_none=True)

        times[name] = bench.time_fn(step, warmup=3, repeats=repeats, device=device)
        del model, run
    ratio = times["bf16"].median / times["fp8"].median
    return {"sizes": sizes, "compiled": compile, "emulated": not fp8_tensor_cores(device),
            "bf16": str(times["bf16"]), "fp8": str(times["fp8"]), "fp8 speed-up": ratio}


#: On CUDA, a 16-bit product must reach this many times the FP32 throughput, or the check fails: every GPU with
#: Tensor Cores does far more (dense datasheet ratios are 4× to 15×); an AMP path that silently falls back to
#: FP32 kernels does not.
MIN_TENSOR_CORE_SPEEDUP = 2.0


def speed_problems(matmuls: list[dict], device_type: str) -> list[str]:
    """On CUDA: one line per 16-bit product slower than ``MIN_TENSOR_CORE_SPEEDUP`` × the FP32 one (same size).

    Empty on other devices (a CPU has no Tensor Cores to check) and when every product is fast enough.

    >>> rows = [{"dtype": "float32", "n": 8192, "TFLOP/s": 50.0}, {"dtype": "bfloat16", "n": 8192, "TFLOP/s": 60.0}]
    >>> speed_problems(rows, "cuda")
    ['bfloat16 8192³: 1.2× the float32 throughput (a Tensor Core product should reach at least 2×)']
    >>> speed_problems(rows, "cpu")
    []
    """
    if device_type != "cuda":
        return []
    fp32 = {row["n"]: row["TFLOP/s"] for row in matmuls if row["dtype"] == "float32"}
    problems = []
    for row in matmuls:
        if row["dtype"] in ("bfloat16", "float16") and row["n"] in fp32 and fp32[row["n"]] > 0:
            ratio = row["TFLOP/s"] / fp32[row["n"]]
            if ratio < MIN_TENSOR_CORE_SPEEDUP:
                problems.append(f"{row['dtype']} {row['n']}³: {ratio:.2g}× the float32 throughput (a Tensor Core "
                                f"product should reach at least {MIN_TENSOR_CORE_SPEEDUP:g}×)")
    return problems


def environment(device_type: str) -> dict[str, str]:
    import torch

    info = {
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "platform": platform.platform(),
        "device": device_type,
    }
    if device_type == "cuda":
        props = torch.cuda.get_device_properties(0)
        info.update({
            "gpu": props.name,
            "gpu memory": f"{props.total_memory / 2**30:.1f} GiB",
            "compute capability": f"{props.major}.{props.minor}",
            "cuda": str(torch.version.cuda),
            "cudnn": str(torch.backends.cudnn.version()),
        })
    else:
        from .device import describe

        info["cpu"] = describe(torch.device("cpu")).name
    return info


def render(report: dict) -> str:
    lines = ["# GPU check" + (" (CPU dry run)" if report["cpu_dry_run"] else ""), ""]
    lines += [f"- **{k}**: {v}" for k, v in report["environment"].items()]
    lines += ["", f"**Result: {'PASS' if report['ok'] else 'FAIL'}** in {report['seconds']:.0f} s", "",
              "## Notebooks under `pytest --nbval`", "",
              "Outputs were stored on a CPU; a cell whose output differs here is listed, not failed.", "",
              "| notebook | cells | status | cells that raised | cells whose output differs |",
              "|---|---|---|---|---|"]
    for nb in report["notebooks"]:
        lines.append(f"| {nb['path']} | {nb['cells']} | {nb['status']} | {', '.join(nb['errors']) or '–'} "
                     f"| {', '.join(nb['differs']) or '–'} |")
    gpu = report["gpu_tests"]
    lines += ["", "## Package tests marked `gpu`", "",
              f"{gpu['passed']} passed, {gpu['failed']} failed, {gpu['skipped']} skipped", ""]
    bench = report.get("benchmark")
    if bench:
        lines += ["## Lesson-06 benchmark", "", f"MLP sizes: {bench['sizes']}", "", "```", bench["table"], "```", "",
                  *([bench["noise"], ""] if bench.get("noise") else []),
                  "| matmul dtype | n | time | TFLOP/s | fraction of datasheet peak |", "|---|---|---|---|---|"]
        for row in bench["matmuls"]:
            frac = f"{row['fraction of peak']:.0%} ({row['peak source']})" if "fraction of peak" in row else "–"
            lines.append(f"| {row['dtype']} | {row['n']} | {row['time']} | {row['TFLOP/s']:.3g} | {frac} |")
    fp8 = report.get("fp8")
    if fp8:
        lines += ["", "## Lesson-10 FP8 row (bf16 autocast vs torchao Float8Linear, forward + backward)", ""]
        if "skipped" in fp8:
            lines.append(f"Skipped: {fp8['skipped']}.")
        else:
            lines += ["| model | compiled | FP8 emulated | bf16 step | FP8 step | FP8 speed-up |",
                      "|---|---|---|---|---|---|",
                      f"| {fp8['sizes']['depth']} × Linear({fp8['sizes']['width']}), batch {fp8['sizes']['batch']} "
                      f"| {fp8['compiled']} | {fp8['emulated']} | {fp8['bf16']} | {fp8['fp8']} "
                      f"| {fp8['fp8 speed-up']:.2f}× |"]
    if report.get("fp8_error"):
        lines += ["", f"FP8 row failed: `{report['fp8_error']}`"]
    if report.get("benchmark_error"):
        lines += ["", f"Benchmark failed: `{report['benchmark_error']}`"]
    if report.get("speed_problems"):
        lines += ["", "Too slow for Tensor Cores (the check fails):", ""] + [f"- {p}" for p in report["speed_problems"]]
    if report.get("logs"):
        lines += ["", "## Log tails", ""]
        for name, text in report["logs"].items():
            lines += [f"### {name}", "", "```", text.strip()[-2500:], "```", ""]
    return "\n".join(lines) + "\n"


#: What the check needs beyond torch, numpy, matplotlib and pytest.
NOTEBOOK_PACKAGES = ("nbval", "nbclient", "nbformat", "ipykernel", "ipywidgets", "torchao==0.18.0")
#: Already on the lent H200 machine (see the device tool's KINDS.md): not carried, so as not to shadow them.
ON_LENT_MACHINE = {"attrs", "coverage", "iniconfig", "packaging", "pluggy", "psutil", "pygments", "pytest",
                   "python_dateutil", "typing_extensions", "tzdata", "six", "pyyaml"}


def download_wheels(dest: Path, python_version: str = "3.12") -> list[Path]:
    """Fetch the notebook packages as manylinux wheels for ``python_version`` into ``dest``, for a GPU
    machine that has torch but no network (CONTRIBUTING.md: "The GPU check")."""
    dest.mkdir(parents=True, exist_ok=True)
    platforms = ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64",
                 "manylinux2014_x86_64", "manylinux1_x86_64"]
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:", "--python-version",
           python_version, "--implementation", "cp", "-d", str(dest), *NOTEBOOK_PACKAGES]
    for plat in platforms:
        cmd += ["--platform", plat]
    subprocess.run(cmd, check=True)
    kept = []
    for wheel in sorted(dest.glob("*.whl")):
        if wheel.name.split("-")[0].lower() in ON_LENT_MACHINE:
            wheel.unlink()
        else:
            kept.append(wheel)
    return kept


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ampcourse gpucheck", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cpu", action="store_true", help="dry run on the CPU (small sizes)")
    parser.add_argument("--report-dir", default=str(ROOT / "reports"), help="where the report goes")
    parser.add_argument("--skip-notebooks", action="store_true", help="only the GPU tests and the benchmark")
    parser.add_argument("--download-wheels", metavar="DIR",
                        help="only download the notebook packages as wheels into DIR (for a GPU machine offline)")
    args = parser.parse_args(argv)
    if args.download_wheels:
        wheels = download_wheels(Path(args.download_wheels))
        size = sum(w.stat().st_size for w in wheels) / 2**20
        print(f"{len(wheels)} wheels, {size:.1f} MiB in {args.download_wheels}")
        return 0

    import torch

    if not args.cpu and not torch.cuda.is_available():
        print("no CUDA GPU is visible to torch: run `python -m ampcourse gpucheck --cpu` for a dry run on the CPU",
              file=sys.stderr)
        return 2
    device_type = "cpu" if args.cpu else "cuda"
    env = dict(os.environ, AMPCOURSE_DEVICE=device_type, PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    start = time.perf_counter()
    report: dict = {"cpu_dry_run": args.cpu, "environment": environment(device_type), "logs": {}}

    notebooks: list[NotebookResult] = []
    if not args.skip_notebooks:
        print("[gpucheck] notebooks under nbval ...", flush=True)
        notebooks, tail = run_notebooks(env, args.cpu, timeout=1800)
        if not notebooks or any(nb.errors for nb in notebooks):
            report["logs"]["nbval"] = tail
    report["notebooks"] = [dict(asdict(nb), status=nb.status) for nb in notebooks]

    print("[gpucheck] tests marked gpu ...", flush=True)
    report["gpu_tests"], tail = run_gpu_tests(env, timeout=900)
    if report["gpu_tests"]["failed"]:
        report["logs"]["gpu tests"] = tail

    print("[gpucheck] lesson-06 benchmark ...", flush=True)
    try:
        os.environ["AMPCOURSE_DEVICE"] = device_type
        report["benchmark"] = run_benchmark(device_type)
    except Exception as err:  # noqa: BLE001 - reported, and the check fails
        report["benchmark_error"] = f"{type(err).__name__}: {err}"
    report["speed_problems"] = speed_problems(report.get("benchmark", {}).get("matmuls", []), device_type)

    print("[gpucheck] lesson-10 FP8 row ...", flush=True)
    try:
        report["fp8"] = fp8_speed_row(device_type, dry_run=args.cpu)
    except Exception as err:  # noqa: BLE001 - reported, and the check fails
        report["fp8_error"] = f"{type(err).__name__}: {err}"

    report["seconds"] = time.perf_counter() - start
    report["ok"] = (
        (args.skip_notebooks or (bool(notebooks) and not any(nb.errors for nb in notebooks)))
        and report["gpu_tests"]["failed"] == 0
        and "benchmark" in report
        and "fp8" in report
        and not report["speed_problems"]
    )
    out_dir = Path(args.report_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    name = "cpu-dry-run" if args.cpu else _slug(report["environment"].get("gpu", "cuda"))
    md = out_dir / f"gpu-check-{name}.md"
    md.write_text(render(report), encoding="utf-8")
    (out_dir / f"gpu-check-{name}.json").write_text(json.dumps(report, indent=1, default=str), encoding="utf-8")
    print(render(report))
    print(f"[gpucheck] report: {md}", flush=True)
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
