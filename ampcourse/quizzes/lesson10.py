"""Lesson 10 quiz."""

import math

import torch

from ..fp8 import granularity_errors
from ..quiz import Question


def _granularity_why() -> str:
    """The explanation, from the lesson's own emulation (fp8.granularity_errors at an outlier of 10^6)."""
    r = {x.name: x for x in granularity_errors(6.0)}
    return (f"A row shares one scale, so the outlier's scale covers all of token 0: rowwise flushes "
            f"{r['rowwise'].flushed_neighbours} of its {r['rowwise'].n_neighbours} other values to 0 and leaves the "
            f"other tokens at {r['rowwise'].other_rows_error:.1%} error (flushed: {r['rowwise'].flushed_other_rows}). "
            f"Per-tensor scaling would hurt every token ({r['per-tensor'].flushed_other_rows:,} of "
            f"{r['per-tensor'].n_other_rows:,} flushed); MX's 32-value blocks lose only "
            f"{r['MX: 1x32, E8M0'].flushed_neighbours} neighbours.")


def _e4m3_of_1000() -> int:
    """The option index of what this torch's cast of 1000.0 to float8_e4m3fn gives: 448 where the eager cast
    saturates (torch 2.12 and newer), NaN in torch 2.11 and older (torchao's ``to_fp8_saturated`` note)."""
    value = torch.tensor(1000.0).to(torch.float8_e4m3fn).float().item()
    return 2 if value == 448.0 else 1 if math.isnan(value) else 0


def questions() -> list[Question]:
    return [
        Question(
            "A tensor's largest magnitude is 0.02. What per-tensor scale does an E4M3 cast use?",
            ["0.02 / 448", "448 / 0.02 = 22,400", "1: E4M3 reaches 0.02 already"],
            answer=1,
            why="The scale maps amax onto the format's max: 448 / amax. Without it, values far below 0.02 flush.",
        ),
        Question(
            "Which tensors does torchao's default recipe cast to E5M2?",
            ["the weights", "the output gradients", "the inputs"],
            answer=1,
            why="Its tensorwise default puts output gradients in E5M2 and inputs and weights in E4M3: with one "
                "scale per large gradient tensor, whose spread moves from step to step, range is the safe bet. "
                "That is a recipe's choice, not a rule: where a gradient's spread fits E4M3, E4M3 is more accurate "
                "(the lesson's six backward products), and torchao's rowwise recipes use E4M3 for gradients too.",
        ),
        Question(
            "Your FP8 linear's outputs are all about 10⁸ times too large. You passed scale_a=scale_x to "
            "torch._scaled_mm, where x8 = (x · scale_x).to(E4M3). What is wrong?",
            ["nothing: FP8 products are that inaccurate", "_scaled_mm wants the inverse scales (1 / scale_x, "
             "1 / scale_w): it multiplies by them to dequantise", "E4M3 overflowed"],
            answer=1,
            why="_scaled_mm multiplies by its scales to dequantise: it must get 1 / scale_x. With scale_x the "
                "product is scaled twice instead of undone.",
            kind="diagnosis",
        ),
        Question(
            "Delayed scaling with a history of 16 steps meets a one-step spike of 2^6. What happens?",
            ["nothing: the history absorbs it", "the spike clips, then 16 steps use a scale 64× too small",
             "the scale grows 64× for one step"],
            answer=1,
            why="The spike's step uses the old history (it clips); its amax then dominates the history's maximum for "
                "16 steps, so small values flush until it leaves the window.",
            kind="transfer",
        ),
        Question(
            "A gradient tensor's values span 2^12 from its amax down to the smallest that matters, and it gets its "
            "own per-tensor scale. Which format keeps it more accurately?",
            ["E5M2: gradients always need range", "E4M3: the spread fits its normal span (2^14.8), and its extra "
             "mantissa bit halves every value's rounding error", "neither: gradients must stay in bf16"],
            answer=1,
            why="After the scale, what matters is whether the spread fits the format's normal numbers: 2^12 fits "
                "E4M3's 448 / 2^-6 ≈ 2^14.8, so E4M3 is more accurate (lesson 10's backward products showed it). "
                "torchao's tensorwise default still uses E5M2 for gradients as the safe bet for one scale per large "
                "tensor; its rowwise recipes use E4M3.",
            kind="transfer",
        ),
        Question(
            "An activation (64 tokens × 512 features, about N(0, 1)) has one value of 10^6 in token 0. It is cast to "
            "E4M3 with rowwise scales. Which values lose their precision?",
            ["every token's: one outlier ruins the scale", "token 0's other values: its row shares the outlier's "
             "scale", "only the 31 values of the outlier's own 32-value block"],
            answer=1,
            why=_granularity_why(),
            kind="transfer",
        ),
        Question(
            "In the installed torch, what does casting 1000.0 to float8_e4m3fn give?",
            ["inf", "NaN", "448"],
            answer=_e4m3_of_1000(),
            why="float8_e4m3fn has no inf. The installed torch's cast gives "
                f"{torch.tensor(1000.0).to(torch.float8_e4m3fn).float().item():g} (computed when this quiz was "
                "made); torch 2.12 and newer saturate to 448, torch 2.11 and older gave NaN. E5M2 has inf: a value "
                "that rounds past its max, 57344, becomes inf.",
        ),
    ]
