"""Lesson 01 quiz. The FP8 answer and the FP16 addition are computed from live casts."""

import math

import torch

from ..quiz import Question


def _fp8_saturation() -> tuple[list[str], int, str]:
    stored = torch.tensor(500.0).to(torch.float8_e4m3fn).float().item()
    largest = torch.finfo(torch.float8_e4m3fn).max
    options = ["inf", "NaN", f"{largest:g}"]
    if math.isnan(stored):
        return options, 1, "this torch turns an out-of-range value into NaN (E4M3FN has no infinity)."
    if math.isinf(stored):
        return options, 0, "this torch stores inf."
    return options, 2, (f"E4M3FN has no infinity; this torch's cast saturates to the largest finite value, "
                        f"{stored:g}.")


def questions() -> list[Question]:
    fp8_options, fp8_answer, fp8_why = _fp8_saturation()
    total = (torch.tensor(1024.0, dtype=torch.float16) + torch.tensor(0.25, dtype=torch.float16)).item()
    return [
        Question(
            "Which format has the same exponent range as FP32?",
            ["FP16", "BF16", "FP8 E4M3"],
            answer=1,
            why="BF16 keeps FP32's 8 exponent bits (bias 127) and shortens the mantissa to 7 bits.",
        ),
        Question(
            "Why is 2049 stored as 2048 in FP16?",
            ["2049 overflows FP16", "between 2048 and 4096 FP16's values are 2 apart", "FP16 cannot store odd numbers"],
            answer=1,
            why="FP16 has 10 mantissa bits: each power-of-two interval holds 1024 values, so from 2048 to 4096 "
                "they are 2048/1024 = 2 apart; 2049 is a tie and rounds to the even neighbour, 2048.",
        ),
        Question(
            "What does the installed torch store when you cast 500.0 to float8_e4m3fn?",
            fp8_options,
            answer=fp8_answer,
            why=fp8_why + " (Computed now, from a live cast.)",
        ),
        Question(
            "In FP16, you add 0.25 to 1024.0. What is the result?",
            ["1024.25", "1024.0", "1025.0"],
            answer=[1024.25, 1024.0, 1025.0].index(total),
            why="Between 1024 and 2048 FP16's values are 1024/1024 = 1 apart; 0.25 is less than half that gap, "
                "so the sum rounds back to 1024 — the update is lost. (Computed now with torch.)",
            kind="transfer",
        ),
    ]
