"""Lesson 07 quiz."""

from ..quiz import Question


def questions() -> list[Question]:
    return [
        Question(
            "Forward hooks report inf in block.up and block.act, then NaN in norm and head. Which module do you fix?",
            ["head, where the NaN is", "block.up, the first in execution order", "norm, which makes the NaNs"],
            answer=1,
            why="Every module after the first one only inherits its inf; norm turns infs into NaNs (inf − inf). "
                "The first non-finite output, in execution order, is where the trouble starts.",
            kind="diagnosis",
        ),
        Question(
            "Inside torch.autocast(float16) you call block(x.float()). What dtype does the Linear in the block run in?",
            ["float32: you cast the input", "float16: autocast casts the input back", "it raises a dtype error"],
            answer=1,
            why="autocast casts the inputs of listed ops such as linear to float16, whatever dtype you hand them. "
                "An FP32 island needs autocast disabled too.",
            kind="transfer",
        ),
        Question(
            "The scale halves on every step, from 65536 down to 6e-05 in 30 steps, and every loss is NaN. What helps?",
            ["a smaller init_scale", "finding the inf in the forward pass (FP32 island or bf16)",
             "a larger growth_interval"],
            answer=1,
            why="The loss is NaN before any scaling, so the forward pass overflows, and every step is skipped "
                "whatever the scale. The scaler's settings cannot fix that. (With finite losses and every step "
                "skipped, the inf would be in the backward pass: the scale alone does not say where.)",
            kind="diagnosis",
        ),
        Question(
            "Why can a model trained with bf16 autocast produce inf (and then NaN) under fp16 autocast?",
            ["bf16 weights cannot be loaded in fp16", "its activations may exceed 65504, fp16's maximum",
             "fp16 has fewer mantissa bits than bf16"],
            answer=1,
            why="bf16 has float32's exponent range, so nothing kept activations small; fp16 overflows at 65504, and "
                "later ops turn the inf into NaN. (fp16 actually has more mantissa bits than bf16: 10 against 7.)",
            kind="transfer",
        ),
    ]
