"""Lesson 04 quiz."""

from ..quiz import Question


def questions() -> list[Question]:
    return [
        Question(
            "A step's gradients contain an inf. What does scaler.step(optimizer) do?",
            ["raises an error", "skips optimizer.step() for this step", "steps with the inf values set to 0"],
            answer=1,
            why="GradScaler records the inf during unscaling and skips the optimizer step; update() then backs off.",
        ),
        Question(
            "With torch's defaults, how many clean steps does it take for the scale to double?",
            ["1", "100", "2000"],
            answer=2,
            why="growth_interval defaults to 2000: the tracker of consecutive clean steps must reach it.",
        ),
        Question(
            "How can you tell, with the public API, that the last step was skipped?",
            ["scaler.get_scale() went down at update()", "the loss is NaN",
             "scaler.step(optimizer) returned None"],
            answer=0,
            why="update() lowers the scale only after an overflow, and an overflow is exactly when the step is "
                "skipped. The loss is usually finite on a skipped step (the overflow is in the scaled backward "
                "pass), and scaler.step returns what optimizer.step returns — None for SGD or Adam whether it "
                "ran or not.",
        ),
        Question(
            "scaler.step(optimizer) raises `ValueError: Attempting to unscale FP16 gradients.` What did you do?",
            ["forgot scaler.scale(loss)", "converted the model with .half(), so the gradients are float16",
             "called scaler.update() twice"],
            answer=1,
            why="GradScaler unscales float32 gradients; float16 parameters give float16 gradients, "
                "which it refuses. "
                "Keep the model in float32 and let autocast cast per operation.",
            kind="diagnosis",
        ),
    ]
