"""Lesson 03 quiz. The CUDA softmax policy is probed from the installed torch (no GPU needed)."""

from ..quiz import Question


def _cuda_softmax_dtype() -> str:
    from ..autocast_lists import probe

    policy = probe("aten::softmax.int", "cuda").policy
    return {"fp32": "float32", "lower_precision_fp": "float16"}.get(policy, "the input's dtype (float16)")


def questions() -> list[Question]:
    softmax = _cuda_softmax_dtype()
    options = ["float16", "float32", "bfloat16"]
    return [
        Question(
            "Under CPU bfloat16 autocast, what dtype does F.cross_entropy(logits, y) return for bfloat16 logits?",
            ["bfloat16", "float32", "float16"],
            answer=1,
            why="cross_entropy is on CPU autocast's FP32 list: the logits are cast up first (see the trace).",
        ),
        Question(
            "Why is backward() called outside the autocast region?",
            ["it would crash inside",
             "outside, each backward op runs in the dtypes its forward chose; inside, autocast would recast the "
             "backward ops on its lists too",
             "to save the cast cache"],
            answer=1,
            why="The autograd engine runs backward under the autocast state of the thread that calls backward(): "
                "inside the region, backward ops on a list are recast (torch.linalg.inv's two backward matmuls "
                "ran in bfloat16 instead of float32, and the gradient changed). torch's docstring: \"Backward "
                "passes under autocast are not recommended.\"",
        ),
        Question(
            "Inside `with torch.autocast('cpu', enabled=False):`, what happens to h @ w.T for a bfloat16 h "
            "and a float32 w?",
            ["float32, because autocast is off", "bfloat16, because h is bfloat16",
             "a RuntimeError: matmul wants equal dtypes"],
            answer=2,
            why="With autocast off nothing reconciles the dtypes, and matmul does not promote (computed in the "
                "FP32-island cell). Cast with h.float() inside an FP32 island.",
            kind="diagnosis",
        ),
        Question(
            "On a CUDA GPU under float16 autocast, x is float16. What dtype does torch.softmax(x, dim=-1) return?",
            options,
            answer=options.index(softmax) if softmax in options else 0,
            why=f"CUDA autocast's lists differ from the CPU's: there softmax is on the FP32 list, so it returns "
                f"{softmax} (probed now from this torch's CUDA autocast kernel; no GPU needed). Predict per "
                "device, never from one device's trace.",
            kind="transfer",
        ),
    ]
