"""The course map: the one list of lessons that navigation, the table of contents and the grader
table are generated from.

A lesson ``NN`` lives in ``notebooks/NN_slug.ipynb``; its exercise in ``exercises/NN_slug.ipynb``,
generated from ``solutions/NN_slug.ipynb``; its checks in ``ampcourse/checks/lessonNN.py``; its
widgets in ``ampcourse/widgets/lessonNN.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

# Notebook plumbing every lesson may import without listing it (device choice, quizzes, tables, printed code).
PLUMBING: tuple[str, ...] = ("device", "quiz", "tables", "source")

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Lesson:
    number: str
    slug: str
    title: str
    outcome: str
    # The topic modules of ``ampcourse`` the lesson teaches from (besides PLUMBING and its own widgets module).
    # ``build`` writes the "Where things live" map in CONTRIBUTING.md from these; a test fails when a lesson
    # imports a module that is not listed here.
    modules: tuple[str, ...] = ()

    @property
    def filename(self) -> str:
        return f"{self.number}_{self.slug}.ipynb"

    def lesson_path(self, root: Path = ROOT) -> Path:
        return root / "notebooks" / self.filename

    def exercise_path(self, root: Path = ROOT) -> Path:
        return root / "exercises" / self.filename

    def solution_path(self, root: Path = ROOT) -> Path:
        return root / "solutions" / self.filename


LESSONS: tuple[Lesson, ...] = (
    Lesson("00", "start_here", "Start here",
           "your hardware, which AMP dtype suits it, how widgets and grading work",
           modules=()),
    Lesson("01", "float_formats", "Float formats",
           "FP32/TF32/FP16/BF16/FP8 bit layouts, range vs precision, ULP, subnormals, rounding",
           modules=("floats",)),
    Lesson("02", "underflow_overflow", "Underflow and overflow",
           "real gradients vs the FP16 range; what a loss scale does; overflow at 65504",
           modules=("gradients", "autocast_lists")),
    Lesson("03", "autocast", "autocast",
           "what autocast really casts, op by op; the op lists; CPU vs CUDA; regions; custom ops",
           modules=("autocast_trace", "autocast_lists")),
    Lesson("04", "gradscaler", "GradScaler dynamics",
           "scale → backward → unscale → inf check → step/skip → update; the scale's trajectory",
           modules=("scaler_run", "scaler_sim", "gradients")),
    Lesson("05", "accumulation_clipping", "Accumulation and clipping",
           "loss/N, one update per effective batch, remainders; unscale_ → clip → step → update",
           modules=("accumulation",)),
    Lesson("06", "speed_memory", "Speed and memory",
           "honest benchmarks; FP32 vs TF32 vs FP16 vs BF16; torch.compile; what limits the speed-up",
           modules=("bench",)),
    Lesson("07", "troubleshooting", "Troubleshooting",
           "NaN/Inf hunting, FP32 islands, scale collapse, bf16-trained models in fp16",
           modules=("troubleshoot", "diagnostics", "scaler_run", "bench", "fp8")),
    Lesson("08", "distributed", "Distributed",
           "DDP + AMP under torchrun, no_sync with accumulation",
           modules=("distributed", "ddp_train", "torchrun_local")),
    Lesson("09", "capstone", "Capstone",
           "a real model on real data, the full recipe, checkpoint/resume, FP32 vs AMP side by side",
           modules=("capstone", "bench")),
    Lesson("10", "fp8", "FP8",
           "per-tensor scaling from scratch, E4M3 forward / E5M2 gradients, dynamic vs delayed scaling, "
           "a real FP8 run with torchao",
           modules=("fp8", "capstone")),
    Lesson("11", "own_model", "Your own model",
           "a small transformer's real fp16/bf16 failures (attention scores and masks, a bf16 checkpoint in fp16, "
           "unsafe constants, schedulers on skipped steps), diagnosed by the AMP flight recorder",
           modules=("own_model", "recorder")),
)


def lesson(number: str) -> Lesson:
    """The lesson with this two-digit number (``"03"``)."""
    for item in LESSONS:
        if item.number == number:
            return item
    raise ValueError(f"no lesson {number!r}; lessons are {', '.join(x.number for x in LESSONS)}")


def published(root: Path = ROOT) -> list[Lesson]:
    """The lessons whose notebook exists (the course grows lesson by lesson)."""
    return [item for item in LESSONS if item.lesson_path(root).exists()]
