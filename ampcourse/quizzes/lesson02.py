"""Lesson 02 quiz."""

from ..quiz import Question


def questions() -> list[Question]:
    return [
        Question(
            "What does multiplying the loss by S = 2**10 do to the gradients?",
            ["nothing: the optimizer divides it out", "multiplies every gradient by 2**10",
             "adds 10 to every gradient's exponent only where it would underflow"],
            answer=1,
            why="Backpropagation is linear in the loss, so every gradient is multiplied by S; they must be "
                "divided by S (unscaled) before the optimizer step.",
        ),
        Question(
            "max|g| is 0.5. What is the largest power-of-two scale that cannot overflow FP16?",
            ["2**16", "2**17", "2**15"],
            answer=0,
            why="0.5 × 2**16 = 32768 fits; 0.5 × 2**17 = 65536 > 65504 overflows. By formula: "
                "floor(log2(65504 / 0.5)) = floor(16.9999…) = 16.",
        ),
        Question(
            "Why keep FP32 master weights when training in BF16?",
            ["BF16 cannot represent large weights", "small updates are rounded away in BF16", "GradScaler needs them"],
            answer=1,
            why="BF16 has 8 significant bits: near 1.0 its values are 2**-7 apart, so an update of 1e-3 is lost.",
        ),
        Question(
            "After switching a model to float16 autocast without a scaler, the first layer's weights stop "
            "changing while the last layer still learns. The likeliest cause?",
            ["the first layer's gradients are below 2**-25 and flush to zero in float16",
             "float16 overflows in the first layer", "autocast skips the first layer"],
            answer=0,
            why="Gradients shrink as they flow back through the layers; the earliest layers get the smallest. "
                "Below half of float16's smallest subnormal they round to 0, so those weights never move — "
                "exactly what a loss scale fixes.",
            kind="diagnosis",
        ),
    ]
