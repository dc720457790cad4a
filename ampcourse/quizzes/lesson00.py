"""Lesson 00 quiz."""

from ..quiz import Question


def questions() -> list[Question]:
    return [
        Question(
            "Your GPU is an A100 (Ampere, bfloat16 Tensor Cores). Which AMP recipe does the course recommend there?",
            ["float16 autocast + GradScaler", "bfloat16 autocast, no GradScaler",
             "no autocast: convert the model with .half()"],
            answer=1,
            why="bfloat16 has float32's exponent range, so gradients do not underflow and no loss scaling is "
                "needed. (float16 + GradScaler also works on an A100 and keeps more mantissa bits; it is the "
                "course's default only where bfloat16 is not fast.)",
        ),
        Question(
            "In the slider, a value of 1e-8 is cast to float16. What is stored?",
            ["1e-8 exactly", "the nearest subnormal", "0"],
            answer=2,
            why=f"float16's smallest subnormal is 2**-24 ≈ {2.0**-24:.2g}; 1e-8 is less than half of it, "
                "so round-to-nearest gives 0.",
        ),
        Question(
            "A T4 GPU (Turing) has float16 Tensor Cores but no fast bfloat16. Which recipe fits it?",
            ["bfloat16 autocast, no GradScaler", "float16 autocast + GradScaler", "float32 only: AMP needs Ampere"],
            answer=1,
            why="float16 is what its Tensor Cores run fast; float16's narrow range then needs the GradScaler "
                "to keep small gradients from flushing to zero.",
            kind="transfer",
        ),
    ]
