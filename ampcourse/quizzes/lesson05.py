"""Lesson 05 quiz."""

from ..quiz import Question


def questions() -> list[Question]:
    return [
        Question(
            "Ten micro-batches, windows of 4: the last window has 2. You divide its losses by 4. Its gradient is…",
            ["twice too large", "half the right size", "right"],
            answer=1,
            why="Dividing by 4 instead of 2 halves it — the remainder report above measures the ratio 0.5.",
        ),
        Question(
            "You call clip_grad_norm_ before scaler.unscale_. With S = 2**16, what happens?",
            ["nothing: clipping is scale-invariant", "clipping compares the threshold with gradients ×S",
             "torch raises an error"],
            answer=1,
            why="The gradients are still multiplied by S, so the norm clip_grad_norm_ returns is S times the true "
                "one and the clip fires on every step (all 50 of the lesson's run). With SGD that shrinks the update "
                "to almost nothing. AdamW's normalisation cancels the shrink while the shrunk gradients, about "
                "max_norm / (S × √N) per element, stay well above its eps (1e-8): on the lesson's small model the "
                "loss hides the bug; with millions of weights they reach eps and AdamW's update shrinks too. Either "
                "way the threshold means nothing.",
        ),
        Question(
            "Two losses, two optimizers, one scaler. How many times per iteration do you call scaler.update()?",
            ["once", "once per loss", "once per optimizer"],
            answer=0,
            why="One update per iteration, after every scaler.step: it backs off if any optimizer found an inf.",
        ),
        Question(
            "With windows of 4, training with accumulation learns like training on one micro-batch at a time with "
            "a quarter of the data. Which bug fits?",
            ["optimizer.zero_grad() inside the micro-batch loop", "dividing each loss by 4",
             "calling scaler.update() once per window"],
            answer=0,
            why="zero_grad inside the loop wipes the first three micro-batches' gradients: each step uses only the "
                "last one (divided by 4). Zero once per window, before its first backward.",
            kind="diagnosis",
        ),
    ]
