"""Lesson 09 quiz."""

from ..quiz import Question


def questions() -> list[Question]:
    return [
        Question(
            "A float16 step is skipped (inf gradients). Under the course's rule — the schedule counts the optimizer "
            "steps that were applied — what does the learning-rate scheduler do?",
            ["step anyway, with the loop counter", "not step: the weights did not move", "step twice next time"],
            answer=1,
            why="The weights did not move, so the schedule waits; the fp16 demo above shows the final lr matching the "
                "number of applied steps. (Stepping anyway is a defensible alternative when the schedule is sized in "
                "loop iterations; skips are rare, so the two differ little.)",
        ),
        Question(
            "How can your loop tell that scaler.step(optimizer) skipped the step?",
            ["scaler.step returns False", "the scale after update() is smaller than before",
             "read the scaler's private found-inf flags"],
            answer=1,
            why="A skip always backs the scale off (lesson 04). scaler.step returns what optimizer.step returns, and "
                "the found-inf flags are private.",
        ),
        Question(
            "You resume from a checkpoint with model, optimizer and scaler, but not the RNG states. The resumed run…",
            ["is identical to the uninterrupted one", "still trains, but shuffles and drops out differently",
             "crashes"],
            answer=1,
            why="The data order and dropout masks come from random generators; without their state the run "
                "continues, but as a different run.",
        ),
        Question(
            "AMP − FP32 accuracy is +0.1% on one seed; FP32 alone varies by 0.4% between seeds. What can you conclude?",
            ["AMP is more accurate", "nothing from one seed: the difference is within the seed-to-seed noise",
             "FP32 is broken"],
            answer=1,
            why="A difference smaller than the noise between seeds is not evidence; compare means over seeds against "
                "their spread, as `comparison.verdict()` does.",
            kind="diagnosis",
        ),
    ]
