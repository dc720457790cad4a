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
            "Over 5 seeds, AMP − FP32 accuracy is +0.5 points on every seed; FP32 alone varies by 3 points between "
            "seeds. Under the course's rule (`capstone.paired_verdict`), what is the verdict?",
            ["within noise: 0.5 is far below the 3-point spread between seeds",
             "amp better: paired by seed, the differences do not vary, so their standard error is 0",
             "nothing can be said from 5 seeds"],
            answer=1,
            why="The two runs of a seed share its luck; the per-seed differences cancel it. The noise of their mean is "
                "its standard error (std of the differences / √5), here 0, so by the rule a consistent 0.5-point "
                "gain is 'amp better' — the rule's verdict, not a proof: a spread of 0 over 5 seeds is weak "
                "evidence that the noise is 0 (accuracies move in steps of 1/359), so more seeds would confirm it "
                "— and FP32's spread between seeds is the noise of one run, not of a paired difference.",
            kind="diagnosis",
        ),
    ]
