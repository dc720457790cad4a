"""Lesson 02 quiz."""

from ..quiz import Question


def questions() -> list[Question]:
    return [
        Question(
            "What does multiplying the loss by S = 2**10 do to the gradients?",
            ["only the loss changes: autograd normalises the gradients, so they come out as before",
             "multiplies every gradient by 2**10",
             "multiplies each gradient by 2**10 once per layer it flows back through, so the earliest layers "
             "get the largest factor"],
            answer=1,
            why="Backpropagation is linear in the loss: d(S·L)/dw = S·dL/dw for every weight and activation, "
                "once, whatever the depth (the chain rule multiplies by the layers' local derivatives, which S "
                "does not change). So every gradient is multiplied by S, and must be divided by S (unscaled) "
                "before the optimizer step.",
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
            why="Gradients often shrink as they flow back through the layers, so the earliest layers tend to get "
                "the smallest (in lesson 02's model the tiny ones come from the branch initialisation instead: "
                "small gradients have more than one cause). Below half of float16's smallest subnormal they round "
                "to 0, so those weights never move — exactly what a loss scale fixes.",
            kind="diagnosis",
        ),
    ]
