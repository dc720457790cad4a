"""Lesson 08 quiz."""

from ..quiz import Question


def questions() -> list[Question]:
    return [
        Question(
            "Rank 1's batch produces an inf gradient; rank 0's is clean. Under DDP with one GradScaler per process…",
            ["only rank 1 skips the step", "both ranks skip: the all-reduce spreads the inf to rank 0's gradients",
             "GradScaler all-reduces found_inf between processes"],
            answer=1,
            why="GradScaler never communicates. The all-reduce averages the gradients, so rank 0 receives the inf "
                "too (an average with an inf in it stays inf; a NaN only where +inf and -inf meet) and its own "
                "inf check skips the step — the window-3 row of the table above.",
            kind="transfer",
        ),
        Question(
            "4 micro-batches per window, no no_sync(). How many gradient all-reduces per window?",
            ["1", "4", "none: DDP waits for optimizer.step()"],
            answer=1,
            why="Every backward of a DDP model all-reduces (the hook counted 2 for a 2-micro-batch window). no_sync() "
                "keeps all but the last one local: 1 per window.",
        ),
        Question(
            "Where does clip_grad_norm_ go in a DDP + AMP step?",
            ["before backward", "after scaler.unscale_, on the all-reduced gradients", "inside no_sync()"],
            answer=1,
            why="After the last backward the gradients are averaged and identical on all ranks; unscale_ then clip, so "
                "every rank clips the same true gradients by the same factor.",
        ),
        Question(
            "The 2-rank run and the 1-process run end with slightly different parameters (within the tolerance). "
            "A bug?",
            ["yes: DDP should be bit-exact", "no: the average of two half-batch means rounds differently from one mean",
             "no: DDP uses a different learning rate"],
            answer=1,
            why="Same maths, different order of the sums (and float16 rounding per half batch): equal to rounding, "
                "within windows × lr × max_norm × eps.",
            kind="diagnosis",
        ),
    ]
