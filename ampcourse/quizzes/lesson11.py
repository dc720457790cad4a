"""Lesson 11 quiz."""

from ..quiz import Question


def questions() -> list[Question]:
    return [
        Question(
            "In float16, `scores.masked_fill(mask, -1e9)` on a float16 tensor…",
            ["silently stores -inf", "raises a RuntimeError: -1e9 cannot be converted to float16 without overflow",
             "stores -65504"],
            answer=1,
            why="The lesson runs it: masked_fill checks that the value fits the tensor's dtype and raises. Use "
                "float('-inf') or torch.finfo(scores.dtype).min — or F.scaled_dot_product_attention with "
                "is_causal=True, which needs no mask constant.",
        ),
        Question(
            "A float16 run: NaN loss on every step, the scale halves each step, and the recorder's first inf/NaN "
            "output is blocks.1.mlp.out. What do you fix?",
            ["raise init_scale", "lower the learning rate", "blocks.1.mlp.out: bf16, or that layer in FP32"],
            answer=2,
            why="The first module whose output holds inf/NaN is the cause; the NaN loss and the collapsing scale "
                "follow from it. No loss scale fixes a forward overflow.",
            kind="diagnosis",
        ),
        Question(
            "Why does a static `loss * 2**24` left in the code make GradScaler's scale fall below 1?",
            ["the scaler multiplies again, so it backs off until scale × 2**24 fits float16's gradients",
             "GradScaler rejects constants", "2**24 is not exact in float16"],
            answer=0,
            why="The scaler cannot see the constant: the product of both is what the backward pass carries, so the "
                "scaler's own scale ends about 2**24 times smaller than it would be — below 1 here. Drop the constant.",
        ),
        Question(
            "torch tells you a scheduler stepped on a skipped step…",
            ["every time, with a warning",
             "once at most: a UserWarning at the first scheduler.step() if no optimizer.step() ran before it",
             "never"],
            answer=1,
            why="LRScheduler.step checks only on its first call whether optimizer.step() has run (torch/optim/"
                "lr_scheduler.py): the lesson shows that one warning, when the first step was skipped. Later skips "
                "are silent; the recorder's scheduler_on_skipped_step finding catches them.",
        ),
    ]
