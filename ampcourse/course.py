"""The course map: the one list of lessons that navigation, the table of contents and the grader
table are generated from.

A lesson ``NN`` lives in ``notebooks/NN_slug.ipynb``; its exercise in ``exercises/NN_slug.ipynb``,
generated from ``solutions/NN_slug.ipynb``; its checks in ``ampcourse/checks/lessonNN.py``; its
widgets in ``ampcourse/widgets/lessonNN.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Lesson:
    number: str
    slug: str
    title: str
    outcome: str

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
           "your hardware, which AMP dtype suits it, how widgets and grading work"),
    Lesson("01", "float_formats", "Float formats",
           "FP32/TF32/FP16/BF16/FP8 bit layouts, range vs precision, ULP, subnormals, rounding"),
    Lesson("02", "underflow_overflow", "Underflow and overflow",
           "real gradients vs the FP16 range; what a loss scale does; overflow at 65504"),
    Lesson("03", "autocast", "autocast",
           "what autocast really casts, op by op; the op lists; CPU vs CUDA; regions; custom ops"),
    Lesson("04", "gradscaler", "GradScaler dynamics",
           "scale → backward → unscale → inf check → step/skip → update; the scale's trajectory"),
    Lesson("05", "accumulation_clipping", "Accumulation and clipping",
           "loss/N, one update per effective batch, remainders; unscale_ → clip → step → update"),
    Lesson("06", "speed_memory", "Speed and memory",
           "honest benchmarks; FP32 vs TF32 vs FP16 vs BF16; torch.compile; what limits the speed-up"),
    Lesson("07", "troubleshooting", "Troubleshooting",
           "NaN/Inf hunting, FP32 islands, scale collapse, bf16-trained models in fp16"),
    Lesson("08", "distributed", "Distributed",
           "DDP + AMP under torchrun, no_sync with accumulation"),
    Lesson("09", "capstone", "Capstone",
           "a real model on real data, the full recipe, checkpoint/resume, FP32 vs AMP side by side"),
    Lesson("10", "fp8", "FP8",
           "per-tensor scaling from scratch, E4M3 forward / E5M2 gradients, dynamic vs delayed scaling, "
           "a real FP8 run with torchao"),
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
