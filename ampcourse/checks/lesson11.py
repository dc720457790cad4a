"""Checks for exercise 11 (your own model): read recorder traces, detect a skipped step, plan a fine-tune.

``diagnose(trace)`` names the finding kind, where and the fix of five recorder traces from runs lesson 11 did
not show (:data:`TRACES`, printed by :func:`show_traces`); the answers come from a fixed list of kinds (the
recorder's :data:`~ampcourse.recorder.KINDS`) and fixes (:data:`FIXES`), so the check compares them strictly.
``applied_step(scaler, optimizer, loss)`` is run on a tiny model with real GradScalers: a clean step, a clean
step with ``AdamW(lr=0)`` (applied, though no weight moves), an overflowing one (with plain SGD and with a fused
one, whose ``step()`` GradScaler calls even on a skipped step), a clean step at a non-exact ``init_scale`` (0.7),
a growth step, a used scaler and a disabled one (with a clean step and with an overflowing one: a disabled scaler
skips nothing).
``finetune_plan(peaks, bf16)`` is compared with the rule of lesson 11 on cases at its boundaries (a peak exactly
2 bits below 65504, ones at 14000, 16200 and 16370, 2.23 to 2.0005 bits below, inf, NaN, no bf16, bf16 with
inf/NaN/above-65504 peaks).
"""

from __future__ import annotations

import ast
import inspect
import math
import re
import textwrap
from collections.abc import Mapping

import torch

from ..recorder import FUSED_OPTIMIZERS, KINDS, LOW_HEADROOM_BITS
from ..tables import Table
from . import FAIL_MARK, CheckFailed, NotStarted, call, call_named, exact_bool, fail, hints, passed, require_callable

FP16_MAX = float(torch.finfo(torch.float16).max)

# --- Task 1: traces ------------------------------------------------------------------------------------------

FIXES: dict[str, str] = {
    "sdpa": "compute attention with F.scaled_dot_product_attention (scaling q before q @ kᵀ buys only a factor √d)",
    "bf16_or_fp32_island": "fine-tune in bf16, or keep that module in FP32 where only fp16 is fast",
    "drop_constant": "remove the constant that multiplies the loss: the GradScaler does the scaling",
    "mean_loss": "average the loss over the tokens instead of summing it",
    "step_if_applied": "step the scheduler only when the scaler applied the step",
    "drop_scaler": "remove the GradScaler (or create it with enabled=(dtype == torch.float16))",
    "larger_scale": "let the scale grow: a larger init_scale or growth_interval back to its default",
    "lower_lr": "lower the learning rate or clip the gradients",
    "fp32_loss": "compute the loss in FP32, outside autocast",
}
"""The fixes a diagnosis may name (key → what it means)."""


def _rows(n, *, dtype="float16", scale=2.0**16, skipped=(), lr=None, loss=2.5, forward="", grad="", lost=""):
    rows = []
    for step in range(n):
        s = scale / 2 ** sum(1 for k in skipped if k < step)  # the scale before the step: halved by each skip
        rows.append({"step": step, "autocast": dtype, "scale": s, "skipped": "yes" if step in skipped else "",
                     "lr": lr(step) if lr else 1e-3, "loss": loss(step) if callable(loss) else loss,
                     "first inf/NaN output": forward, "first inf/NaN grad": grad, "grad lost > 50%": lost})
    return rows


SUMMED_TOKENS = 2**21
"""Trace C's loss is the sum of the cross-entropy over this many tokens (batch 512 × 4096), not their mean."""

TRACES: dict[str, list[dict]] = {
    "A": _rows(8, skipped=range(8), loss=math.nan, forward="encoder.layers.5.ffn.wo",
               grad="encoder.layers.5.ffn.wo.weight"),
    "B": _rows(6, dtype="bfloat16", scale=2.0**16, loss=lambda s: 2.5 - 0.1 * s),
    # C starts at 32768: a summed loss's logit gradient is p - y, at most 1, so at 65536 a token with p(target) below
    # about 4.9e-4 would make it inf where it enters the model, and `loss` would be where (review rev24-r9 finding 9)
    "C": _rows(8, scale=2.0**15, skipped=range(8), loss=lambda s: SUMMED_TOKENS * (2.5 - 0.001 * s),
               grad="lm_head.weight"),
    "D": _rows(6, scale=2.0**24, skipped=range(4), lr=lambda s: 1e-3 * (1 - s / 6)),
    "E": _rows(6, scale=1.0, loss=lambda s: 2.5 - 0.01 * s, lost="embed.weight"),
}
"""Five runs, as the recorder saw them (one row per step). The scale is read before each step and halves after
each skipped one; ``tests/test_checks_lesson11.py`` checks that the course's scale rule
(:func:`ampcourse.diagnostics.diagnose_scale`, which the recorder applies) reads each history as its key says."""


def scale_history(trace: str) -> list[float]:
    """``scaler.get_scale()`` before each step of ``trace`` and after its last (what ``diagnose_scale`` reads)."""
    rows = TRACES[trace]
    last = rows[-1]["scale"] / (2 if rows[-1]["skipped"] else 1)
    return [row["scale"] for row in rows] + [last]


ANSWERS: dict[str, tuple[str, str, str]] = {
    "A": ("overflow", "encoder.layers.5.ffn.wo", "bf16_or_fp32_island"),
    "B": ("unneeded_scaler", "scaler", "drop_scaler"),
    "C": ("scale_collapse", "lm_head.weight", "mean_loss"),
    "D": ("scheduler_on_skipped_step", "scheduler", "step_if_applied"),
    "E": ("underflow", "embed.weight", "larger_scale"),
}
"""The key: (kind, where, fix) of each trace."""

ALSO_FIXES: dict[str, frozenset[str]] = {"E": frozenset({"bf16_or_fp32_island"}), "C": frozenset({"drop_constant"})}
"""Other fixes that remove a trace's cause: bf16 has float32's exponent range, so E's gradients do not underflow;
C's loss is 2**21 times a cross-entropy, which a sum over 2**21 tokens and a leftover constant 2**21 give alike
(the trace cannot tell them apart), so, as the recorder's own scale_collapse message lists both ("a constant
multiplying it ..., a sum instead of a mean"), either fix is accepted."""

WHERE: dict[str, str] = {
    "overflow": "the module in the `first inf/NaN output` column",
    "nonfinite_input": "'input'",
    "nonfinite_loss": "'loss'",
    "nonfinite_grad": "the parameter in the `first inf/NaN grad` column",
    "scale_collapse": "the parameter in the `first inf/NaN grad` column",
    "frequent_skips": "the parameter in the `first inf/NaN grad` column",
    "underflow": "the parameter in the `grad lost > 50%` column",
    "low_headroom": "the module whose output peaks within 2 bits of 65504",
    "unneeded_scaler": "'scaler'",
    "scheduler_on_skipped_step": "'scheduler'",
    "optimizer_not_stepped": "'optimizer'",
}
"""What ``where`` is for every finding kind that names one (all of :data:`~ampcourse.recorder.KINDS` but
``healthy``), so that the list printed with the traces does not give away which kinds the answers are: the task
text, hint 2 and the wrong-``where`` message read it."""


def _spelt(kind: str) -> str:
    """How ``where`` of ``kind`` is spelt: as the trace's column spells it, or the name of the object."""
    return " of the trace, spelt exactly as the trace spells it" if "column" in WHERE[kind] else (
        ", the name of the object" if WHERE[kind].startswith("'") else "")


def where_rule() -> str:
    """:data:`WHERE` as one sentence (hint 2 and the task text)."""
    return "; ".join(f"for {kind}, {rule}" for kind, rule in WHERE.items())


_WHY = {
    "A": "the first module whose output holds inf/NaN is the cause; the loss, the skips and the collapsing scale only "
         "inherit it",
    "B": "the forward ran in bfloat16, which has float32's range: a GradScaler is not needed",
    "C": "the loss is in the millions, 2**21 times a cross-entropy near 2.5 (a sum over 2**21 tokens instead of their "
         "mean, or a leftover constant 2**21 multiplying it): every gradient is 2**21 times too large, so "
         "lm_head.weight's gradient overflows float16 at every scale tried and the scale keeps halving",
    "D": "the lr keeps falling on the skipped steps 0-3: the scheduler ran on steps the scaler skipped",
    "E": "the scale is stuck at 1, so the embedding's small gradients fall below fp16's normal range",
}


_FIX_EXTRA = {
    ("A", "sdpa"): " encoder.layers.5.ffn.wo is the output projection of a feed-forward block, not attention: SDPA "
                   "changes only how attention's scores and softmax are computed.",
    ("A", "larger_scale"): " The loss scale multiplies only the backward pass: a forward overflow is there at any "
                           "scale.",
    ("A", "lower_lr"): " The module overflows float16 in the forward pass at this step already: a smaller lr does "
                       "not bring its values under 65504.",
    ("A", "fp32_loss"): " The loss is NaN because the module's output already is: an FP32 loss inherits it.",
    ("C", "larger_scale"): " A larger scale makes the overflow worse: the gradients are already too large.",
    ("C", "bf16_or_fp32_island"): " bf16 (float32's range) would stop the overflow, but not the cause: the loss is "
                                  "still 2**21 times too large, so with SGD every step is 2**21 times too large (the "
                                  "lr multiplied by that factor). Remove the factor: average the loss, or drop the "
                                  "constant.",
    ("E", "drop_scaler"): " Without a scaler the gradients stay as they are at scale 1 now, below float16's normal "
                          "range: the scale must grow, not go.",
}
"""Why a (trace, fix) pair does not remove that trace's cause, where ``_WHY`` alone does not say it."""


def show_traces() -> None:
    """Print the five traces of Task 1, the fixes to choose from and what ``where`` is for each kind."""
    for name, rows in TRACES.items():
        print(Table(rows, formats={"scale": "{:g}", "lr": "{:.2e}", "loss": "{:g}"}, title=f"trace {name}").text())
        print()
    print("fixes:\n" + "\n".join(f"  {key!r}: {text}" for key, text in FIXES.items()))
    print("\nwhere, per kind:\n" + "\n".join(f"  {kind}: {rule}" for kind, rule in WHERE.items()))


def _answer(task: str, value, trace: str) -> tuple[str, str, str]:
    if isinstance(value, Mapping):
        missing = [key for key in ("kind", "where", "fix") if key not in value]
        if missing:  # the dict itself in the message, never a tuple the learner did not return (rev25-r8 N1)
            raise fail(task, f"diagnose({trace!r}) returned {value!r}: the dict has no "
                             f"{' and no '.join(repr(k) for k in missing)}; return a dict with the keys 'kind', "
                             "'where' and 'fix' (three strings), or a tuple (kind, where, fix).")
        value = (value.get("kind"), value.get("where"), value.get("fix"))
    if not isinstance(value, (tuple, list)) or len(value) != 3 or not all(isinstance(v, str) for v in value):
        raise fail(task, f"diagnose({trace!r}) returned {value!r}: return three strings (kind, where, fix), e.g. "
                         "('overflow', 'blocks.0.attn', 'sdpa').")
    kind, where, fix = (v.strip() for v in value)
    kind, fix = kind.lower(), fix.lower()
    if kind not in KINDS:
        raise fail(task, f"trace {trace}: {kind!r} is not a finding kind; choose one of {', '.join(KINDS)}.")
    if fix not in FIXES:
        raise fail(task, f"trace {trace}: {fix!r} is not one of the fixes; choose a key of FIXES: "
                         f"{', '.join(FIXES)}.")
    return kind, where, fix


def _judge(task: str, trace: str, got: tuple[str, str, str]) -> None:
    kind, where, fix = ANSWERS[trace]
    if got[0] != kind:
        extra = {("A", "nonfinite_loss"): " The NaN loss is a symptom: look for the first module that made it.",
                 ("A", "scale_collapse"): " No loss scale can fix a forward overflow; the scale only follows it.",
                 ("B", "frequent_skips"): " No step was skipped; in bf16 the scaler should not be there at all.",
                 ("D", "frequent_skips"): " Four skips at the start are the scale backing off; look at the lr."}
        raise fail(task, f"trace {trace}: not {got[0]!r} — {_WHY[trace]}.{extra.get((trace, got[0]), '')}")
    if got[1] != where:
        raise fail(task, f"trace {trace}: the kind {kind!r} is right, but where is not {got[1]!r}: for {kind}, "
                         f"where is {WHERE[kind]}{_spelt(kind)}.")
    if got[2] != fix and got[2] not in ALSO_FIXES.get(trace, ()):
        raise fail(task, f"trace {trace}: {got[0]!r} at {got[1]!r} is right, but {got[2]!r} ({FIXES[got[2]]}) does not "
                         f"remove the cause: {_WHY[trace]}.{_FIX_EXTRA.get((trace, got[2]), '')}")


def _order_message(trace: str, names: tuple[str, ...], failed: CheckFailed) -> str:
    """The failure of a namedtuple answer read by position whose fields name some of kind/where/fix at other positions
    (``H(where, kind, remedy)``): the order is the mistake, not the value read at a position (review rev24-r11 N1)."""
    order = ("kind", "where", "fix")
    wrong = [f"its field {n!r} is in the place of {order[i]}" for i, n in enumerate(names)
             if n in order and order.index(n) != i and i < len(order)]
    why = str(failed).removeprefix(f"{FAIL_MARK} Task 1 (diagnose): ").removeprefix(f"trace {trace}: ")
    why = why.split("; ")[0].split(" — ")[0].rstrip(".")
    return (f"trace {trace}: your namedtuple's fields are ({', '.join(names)}), but it is read by position, as "
            f"(kind, where, fix), since it does not name all three: {', '.join(wrong)} (read that way: {why}). "
            "Name its fields kind, where and fix (then they are read by name, in any order), or put them in the "
            "order (kind, where, fix).")


def diagnose(fn) -> None:
    """Task 1: ``diagnose(trace) -> (kind, where, fix)`` for each trace of :data:`TRACES` (a tuple, a namedtuple,
    a list or a dict with those keys)."""
    task = "Task 1 (diagnose)"
    require_callable(task, fn, "diagnose")

    for trace in TRACES:  # a namedtuple (kind, where, fix) becomes a dict of its fields (checks.call_named)
        misplaced: list[tuple[str, ...]] = []
        value = call_named(task, fn, "diagnose", trace, fields=("kind", "where", "fix"), misplaced=misplaced)
        try:
            _judge(task, trace, _answer(task, value, trace))
        except CheckFailed as failed:
            if not misplaced or len(misplaced[0]) != 3:  # a fourth field is the mistake, not the order (rev24-r12 N1)
                raise
            raise fail(task, _order_message(trace, misplaced[0], failed)) from None
    passed(task, f"all {len(TRACES)} traces diagnosed: kind, where and fix of each")


# --- Task 2: applied_step ------------------------------------------------------------------------------------

def _tiny(seed: int = 0, fused: bool = False, optimizer=None):
    torch.manual_seed(seed)
    model = torch.nn.Linear(4, 2)
    make = optimizer or (lambda params: torch.optim.SGD(params, lr=0.1, fused=fused))
    return model, make(model.parameters()), torch.randn(8, 4)


def _loss(model, x):
    with torch.autocast("cpu", dtype=torch.float16):
        return model(x).float().pow(2).mean()


def _one(task, fn, scaler, *, seed=0, fused=False, x_factor=1.0, optimizer=None, state=None):
    model, optimizer, x = _tiny(seed, fused, optimizer)
    if state is not None:
        state.append(optimizer)
    x = x * x_factor
    before = [p.detach().clone() for p in model.parameters()]
    steps = []
    optimizer.register_step_post_hook(lambda *a: steps.append(1))
    result = call(task, fn, "applied_step", scaler, optimizer, _loss(model, x))
    if exact_bool(result) is None:  # a numpy bool is one, by its value (review rev25-r8 N3)
        raise fail(task, f"applied_step returned {result!r}: return True or False (was the step applied?).")
    result = exact_bool(result)
    moved = any(not torch.equal(b, p) for b, p in zip(before, model.parameters(), strict=True))
    return result, bool(steps), moved


_PRIVATE = re.compile(r"_(?!_\w*__$)[A-Za-z_]")  # _name and __name, not a __dunder__ (type(x).__name__)


def _private(fn) -> str | None:
    """The first private name ``fn``'s code uses: an attribute ``obj._name``, or a string ``"_name"`` (as in
    ``getattr(scaler, "_scale")`` or ``vars(scaler)["_scale"]``). Comments are not code: they are ignored."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _PRIVATE.match(node.attr):
            return f".{node.attr}"
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and _PRIVATE.match(node.value):
            return repr(node.value)
    return None


class _Spy(torch.amp.GradScaler):
    """A GradScaler that notes when ``scale()``, ``get_scale()`` and ``update()`` are called (to name what an
    answer missed)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.calls: list[str] = []

    def get_scale(self):
        self.calls.append("get_scale")
        return super().get_scale()

    def scale(self, outputs):
        self.calls.append("scale")
        return super().scale(outputs)

    def update(self, new_scale=None):
        self.calls.append("update")
        return super().update(new_scale)


def applied_step(fn) -> None:
    """Task 2: ``applied_step(scaler, optimizer, loss) -> bool`` does the scaled backward, the step and the update,
    and says whether the step was applied."""
    task = "Task 2 (applied_step)"
    require_callable(task, fn, "applied_step")
    private = _private(fn)
    if private:
        raise fail(task, f"applied_step reads a private attribute ({private}: a name starting with _, such as "
                         "GradScaler's found-inf state or _scale): it can change in any release. Compare "
                         "scaler.get_scale() before and after update().")
    clean = _Spy("cpu", init_scale=2.0**10, growth_interval=1000)
    result, stepped, moved = _one(task, fn, clean)
    if not moved:
        raise fail(task, "a clean step at scale 1024 left the weights unchanged: call scaler.scale(loss).backward(), "
                         "then scaler.step(optimizer) and scaler.update().")
    if not result:
        if "get_scale" not in clean.calls:
            raise fail(task, "a clean step (weights updated) was reported as skipped, and the answer never reads the "
                             "scale — neither scaler.step's return value (optimizer.step()'s: None without a "
                             "closure, applied or not) nor a constant says whether the scaler skipped the step. "
                             "Compare scaler.get_scale() before and after update().")
        raise fail(task, "a clean step (weights updated, scale unchanged) was reported as skipped: the scale stays the "
                         "same on an applied step, so compare with >= (or: not smaller), not >.")
    warmup, optimizers = _Spy("cpu", init_scale=2.0**10, growth_interval=1000), []
    result, _, moved = _one(task, fn, warmup, optimizer=lambda params: torch.optim.AdamW(params, lr=0.0),
                            state=optimizers)
    applied = all(int(s["step"]) == 1 for s in optimizers[0].state.values()) and warmup.get_scale() == 2.0**10
    if applied and not moved and not result:
        raise fail(task, "a clean step with AdamW(lr=0), a warmup's first step, was reported as skipped, yet it was "
                         "applied: the scale stayed 1024 and AdamW's step count went from 0 to 1. Weights can stay "
                         "put on an applied step (lr 0, a warmup, zero gradients), so a weight change is not the "
                         "test: read the scaler's state, scaler.get_scale() before and after update().")
    overflow = _Spy("cpu", init_scale=2.0**40)
    result, stepped, moved = _one(task, fn, overflow)
    calls = list(overflow.calls)  # what the answer called, before this check reads the scale itself
    if overflow.get_scale() == 2.0**40:
        raise fail(task, "after an overflowing step the scale is still 2**40: call scaler.update() after "
                         "scaler.step(optimizer) — it is what backs the scale off.")
    if result:
        raise fail(task, _overflow_reported_applied(calls))
    result, stepped, moved = _one(task, fn, torch.amp.GradScaler("cpu", init_scale=2.0**40), fused=True)
    if result or moved:
        raise fail(task, f"with a fused optimizer (SGD(fused=True) here; fused=True {fused_text()} alike) an "
                         "overflowing step was "
                         "reported as applied: GradScaler.step calls a fused optimizer's step() even when a gradient "
                         "is inf/NaN, and its kernel then skips the update, so 'step() ran' (a step hook, a flag) "
                         "does not mean applied. Compare scaler.get_scale() before and after update()."
                   if not moved else "with a fused optimizer the overflowing step moved the weights: pass the "
                                     "scaled loss's backward and scaler.step(optimizer), not optimizer.step().")
    inexact = _Spy("cpu", init_scale=0.7, growth_interval=1000)
    result, _, moved = _one(task, fn, inexact)
    if moved and not result:
        early = "get_scale" in inexact.calls and ("scale" not in inexact.calls
                                                  or inexact.calls.index("get_scale") < inexact.calls.index("scale"))
        raise fail(task, "a clean step with init_scale=0.7 was reported as skipped"
                   + (": the scale was read before scaler.scale(loss) — until its first call get_scale() returns "
                      "init_scale as given (0.7), not the float32 value the scaler multiplies by (0.699999988), "
                      "so the scale seems to shrink. Read it after scaler.scale(loss)." if early else
                      ": compare the scale read after scaler.scale(loss) with the one after update(), as float32 "
                      "values (get_scale() both times), not with init_scale."))
    grow = torch.amp.GradScaler("cpu", init_scale=2.0**10, growth_interval=1)
    result, _, _ = _one(task, fn, grow)
    if not result:
        raise fail(task, "a clean step after which the scale grew (growth_interval=1) was reported as skipped: only "
                         "a smaller scale means a skip.")
    used = torch.amp.GradScaler("cpu", init_scale=2.0**40)
    _one(task, fn, used)  # one skip: the scale is 2**39 now
    used.update(2.0**10)  # then set to a scale that fits (public API), as a resumed or tuned run would
    result, _, moved = _one(task, fn, used, seed=1)
    if result != moved:
        raise fail(task, f"on a scaler that had already skipped a step, applied_step said {result} but the weights "
                         f"{'moved' if moved else 'did not move'}: read the scale in this call, not a value kept from "
                         "an earlier one.")
    result, _, moved = _one(task, fn, torch.amp.GradScaler("cpu", enabled=False))
    if not result or not moved:
        raise fail(task, "with a disabled scaler (bf16 or fp32: get_scale() is always 1.0) the step is applied: "
                         "return True.")
    result, _, moved = _one(task, fn, torch.amp.GradScaler("cpu", enabled=False), x_factor=1e6)
    if moved and not result:
        raise fail(task, "with a disabled scaler and inf gradients (the input × 1e6 overflows float16) the step was "
                         "reported as skipped, but a disabled scaler skips nothing: scaler.step just calls "
                         "optimizer.step(), which ran even with inf gradients (the weights moved, to inf/NaN). "
                         "Finite gradients or a finite loss are not the test: compare scaler.get_scale() before "
                         "and after update().")
    passed(task, "clean (SGD, and AdamW at lr=0), overflowing (plain and fused SGD), init_scale 0.7, growing, "
                 "used and disabled scalers (clean and overflowing): applied steps True, skipped ones False")


def fused_text() -> str:
    """The optimizers whose fused=True form GradScaler steps on a skipped step, as words
    (:data:`ampcourse.recorder.FUSED_OPTIMIZERS`, read from torch)."""
    names = list(FUSED_OPTIMIZERS)
    return ", ".join(names[:-1]) + " and " + names[-1] if len(names) > 1 else "".join(names)


def _overflow_reported_applied(calls: list[str]) -> str:
    what = "a step whose gradients overflowed (scale 2**40, the optimizer did not step) was reported as applied: "
    if "get_scale" not in calls:
        return what + ("the answer never reads the scale — a finite loss, True, or scaler.step's return value does "
                       "not say whether the scaler skipped the step. Compare scaler.get_scale() before and after "
                       "update().")
    if "update" in calls and "get_scale" not in calls[calls.index("update"):]:
        return what + ("read the scale before update() and after it — reading it after step() but before update() "
                       "sees no change.")
    return what + "a skipped step lowers the scale: return False when get_scale() after update() is smaller."


# --- Task 3: finetune_plan -----------------------------------------------------------------------------------

def plan_rule(peaks: Mapping[str, float], bf16: bool) -> tuple[str, list[str]]:
    """Lesson 11's rule: bf16 where the hardware has it (no module in FP32); else float16 with each module whose
    peak is within LOW_HEADROOM_BITS of 65504 (or inf/NaN) kept in FP32, in the given order."""
    if bf16:
        return "bfloat16", []
    limit = FP16_MAX / 2**LOW_HEADROOM_BITS
    return "float16", [name for name, peak in peaks.items() if not peak <= limit]  # NaN and inf: kept


CASES: list[tuple[dict[str, float], bool]] = [
    ({"blocks.0.mlp.out": 3.0, "blocks.1.mlp.out": 2.4e5, "head": 30.0}, True),
    ({"blocks.0.mlp.out": 3.0, "blocks.1.mlp.out": 2.4e5, "head": 30.0}, False),
    # p: 2.23 bits below, s: 2.02, t: 2.0005 (none low), before the boundary case, so that a too-low threshold
    # (up to 16370: 65504 / 8, 16000, 16300) is named as such and the `>=` message is left for `>=`
    ({"p": 14000.0, "s": 16200.0, "t": 16370.0, "q": 4e4, "r": 5.0}, False),
    # a: exactly 2 bits below (not low); d: between 65504 / 4 = 16376 and 2**14 = 16384 (a threshold of 2**14 misses it)
    ({"a": FP16_MAX / 4, "b": FP16_MAX / 4 * 1.001, "c": FP16_MAX, "d": 16380.0}, False),
    # one module (an answer that squeezes its peaks into a 0-d array breaks on it), and a name of cases 0-1 with
    # another peak (an answer that keeps a plan per name between calls): review rev24-r19 E1, W3
    ({"head": 3e4}, False),
    ({"x": math.inf, "y": 1.0, "z": math.nan}, False),
    ({"enc.wo": 7e4, "enc.wi": 1.5e4, "dec.wo": 2e4}, False),
    ({}, False),
    ({"dropped": 0.0, "mlp": 7e4}, False),  # a peak of 0 (all-zero output; review rev24-r11 W1): infinite headroom
    ({"emb": 2.0, "attn": math.inf, "mlp": 7e4, "head": math.nan}, True),  # bf16: nothing in FP32, not even inf/NaN
]


def _bits(peak: float) -> str:
    """log2(65504 / peak), with enough digits to show it is not 2 (2.23, 2.0005)."""
    bits = math.log2(FP16_MAX / peak)
    return f"{bits:.2f}" if bits >= 2.01 else f"{bits:.4f}"


def _zero_or_inf_error(failed: CheckFailed) -> bool:
    """The answer raised what a headroom computed from a peak of 0 or inf raises: a ZeroDivisionError (``M / p``,
    ``M // p``, ``Fraction(M) / Fraction(p)``, and its subclass ``decimal.DivisionByZero``: review rev24-r15 W1), an
    OverflowError (``Fraction(inf)``, ``int(inf)``), numpy's FloatingPointError (``np.log2(0.0)`` under
    ``np.errstate(all="raise")``; both review rev24-r16 W1) or math's ValueError ("math domain error":
    ``log2(M / inf)``); not another ValueError (``int(nan)``: review rev24-r14 E2). :func:`~ampcourse.checks.call`
    raises its failure inside the handler of the answer's exception (``from None``), so that exception is the
    failure's ``__context__``. Only its type is read (``type()`` and ``issubclass``: no code of the answer runs);
    "domain" is looked for in the failure's text, which quotes it."""
    err = failed.__context__
    kind = type(err)
    if issubclass(kind, (ZeroDivisionError, OverflowError, FloatingPointError)):
        return True
    return issubclass(kind, ValueError) and "domain" in str(failed)


def _odd_peak(name: str, peak: float, bf16: bool) -> str:
    """What the rule does with a peak of 0 or inf, for Task 3's message when an answer raised on one."""
    if peak == 0:
        return f"{name!r} has a peak of 0 (an all-zero output): its headroom is unlimited, so it is never kept in FP32"
    if bf16:  # review rev24-r16 N1: the float16 sentence ("kept in FP32") contradicted the bf16 rule
        return (f"{name!r} has a peak of inf, and with bf16 no module is kept in FP32, not even that one (bf16 has "
                "float32's exponent range: FP32 would add no range)")
    return f"{name!r} has a peak of inf: it has overflowed already, so it is kept in FP32"


def _raises_without(task: str, fn, peaks: dict[str, float], bf16: bool, odd: list[tuple[str, float]]) -> bool:
    """Whether the answer also raises on the case with its peaks of 0 and inf left out: then those are not (only)
    what it trips on, and the message must not blame them (review rev24-r17 E1: numpy's FloatingPointError on a
    NaN cast to int, in a case that holds an inf)."""
    left = {n: p for n, p in peaks.items() if (n, p) not in odd}
    try:
        call(task, fn, "finetune_plan", left, bf16)
    except CheckFailed:
        return True
    return False


_SPELLINGS = {"bf16": "bfloat16", "bfloat": "bfloat16", "fp16": "float16", "half": "float16", "f16": "float16"}


def finetune_plan(fn) -> None:
    """Task 3: ``finetune_plan(peaks, bf16) -> (dtype name, modules to keep in FP32)``."""
    task = "Task 3 (finetune_plan)"
    require_callable(task, fn, "finetune_plan")
    for peaks, bf16 in CASES:
        try:
            got = call(task, fn, "finetune_plan", dict(peaks), bf16)
        except CheckFailed as failed:  # reviews rev24-r12 W1, rev24-r13 W3/N1: name the peak log2(65504 / p) breaks on
            odd = [(n, p) for n, p in peaks.items() if p == 0 or math.isinf(p)]
            if not odd or not _zero_or_inf_error(failed) or _raises_without(task, fn, peaks, bf16, odd):
                if bf16 and not isinstance(failed, NotStarted):  # review rev24-r19 W2: whatever it raised on
                    said = str(failed).removeprefix(f"{FAIL_MARK} {task}: ")
                    raise fail(task, f"peaks {peaks}, bf16=True: {said} With bf16, return ('bfloat16', []) whatever "
                                     "the peaks: there is no headroom to compute.") from None
                raise
            said = "; ".join(_odd_peak(n, p, bf16) for n, p in odd)
            fix = ("With bf16, return ('bfloat16', []) whatever the peaks: there is no headroom to compute." if bf16
                   else "Handle such peaks before computing a headroom in bits (or compare the peak with 65504 / 4).")
            raise fail(task, f"peaks {peaks}, bf16={bf16}: finetune_plan raised; {said}. {fix}") from None
        want = plan_rule(peaks, bf16)
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            raise fail(task, f"finetune_plan returned {got!r}: return (dtype name, list of module names).")
        dtype, keep = got
        dtype = str(dtype).replace("torch.", "")
        spelt = _SPELLINGS.get(dtype.lower())
        if spelt == want[0]:
            raise fail(task, f"peaks {peaks}, bf16={bf16}: {dtype!r} is the right choice, spelt otherwise: return "
                             f"{want[0]!r} (str(torch.{want[0]}) without 'torch.'), or torch.{want[0]} itself.")
        if dtype != want[0]:
            raise fail(task, f"peaks {peaks}, bf16={bf16}: dtype {dtype!r}, expected {want[0]!r} — "
                             + ("with bf16 available, fine-tune in bf16: its range is float32's."
                                if bf16 else "without bf16, fine-tune in float16 and keep the overflowing modules "
                                             "in FP32."))
        keep = list(keep)
        if keep == want[1]:
            continue
        if set(keep) == set(want[1]):
            raise fail(task, f"peaks {peaks}: the right modules in another order; keep the order of peaks.")
        missing, extra = [n for n in want[1] if n not in keep], [n for n in keep if n not in want[1]]
        limit = FP16_MAX / 4
        if strangers := [n for n in keep if n not in peaks]:  # review rev24-r19 E2: a list kept between calls
            raise fail(task, f"peaks {peaks}: kept {keep}, and {strangers} are not modules of these peaks: return "
                             "only names of this call's peaks (a mutable default argument such as keep=[], or a list "
                             "kept between calls, carries names over from an earlier call).")
        if bf16:
            why = "in bf16 no module needs FP32: return an empty list."
        elif keep and set(keep) in ({n for n, p in peaks.items() if p <= limit},
                                    {n for n, p in peaks.items() if p < limit}):
            why = ("you kept the modules with 2 or more bits of headroom (peak <= 65504 / 4), the ones that are "
                   "safe in float16; the rule keeps those with less (peak > 65504 / 4 = 16376, and inf/NaN): "
                   "reverse the comparison.")
        elif any(not math.isfinite(peaks.get(n, 0.0)) for n in missing):
            why = "a peak of inf or NaN has already overflowed: keep that module in FP32."
        elif not missing and extra and all(peaks.get(n) == limit for n in extra):  # only the boundary peak
            why = ("a peak of exactly 65504 / 4 is 2 bits below the limit, not less: the rule keeps modules with "
                   "less than 2 bits of headroom (peak > 65504 / 4).")
        elif extra and set(keep) >= set(peaks):
            why = "keep only the modules with less than 2 bits of headroom, not every module."
        elif not missing and (low := [n for n in extra if n in peaks and 0 < peaks[n] < limit]):
            shown = ", ".join(f"{n!r} at {peaks[n]:g}: log2(65504 / {peaks[n]:g}) = {_bits(peaks[n])} bits of "
                              "headroom" for n in low)
            why = (f"kept {shown}, 2 or more: the threshold is too low. The rule keeps modules with less than 2 bits "
                   "of headroom, peak > 65504 / 4 = 16376.")
        elif missing and (all(peaks.get(n, 0.0) > FP16_MAX for n in keep) if keep
                          else all(peaks[n] <= FP16_MAX for n in missing)):
            why = ("a module within 2 bits of 65504 (peak > 65504 / 4 = 16376) overflows with a little growth: keep "
                   "it in FP32, not only those already above 65504.")
        elif missing:
            shown = ", ".join(f"{n} at {peaks[n]:g} (" + (f"{math.log2(FP16_MAX / peaks[n]):.4f} bits below 65504)"
                                                          if peaks[n] <= FP16_MAX else "above 65504)")
                              for n in missing)
            why = (f"the threshold is less than 2 bits of headroom, peak > 65504 / 4 = 16376: {shown} — keep "
                   "those in FP32 too.")
        else:
            why = "keep only the modules with less than 2 bits of headroom, not every module."
        raise fail(task, f"peaks {peaks}: kept {keep}, expected {want[1]} (missing {missing}, extra {extra}): {why}")
    passed(task, f"{len(CASES)} cases: bf16 or float16, and the modules within 2 bits of 65504 (inf/NaN included)")


HINTS = {
    "diagnose": [
        "For each trace, find the first thing that went wrong: a module, the loss, the scale, the lr, the dtype.",
        "First the cause: the earliest thing in a step that goes wrong (a forward output, the size of the loss, a "
        "gradient, the dtype, the lr); what follows is a symptom. Then name where as the recorder's finding does: "
        + where_rule() + ".",
        "Return (kind, where, fix): kind from recorder.KINDS, where as the list 'where, per kind' says for that "
        "kind (a name from a column of the trace, spelt as it spells it, or an object's name), fix a key of FIXES.",
    ],
    "applied_step": [
        "Which public number of the GradScaler changes when a step is skipped, and when does it change?",
        "update() halves the scale after a skipped step and leaves it alone (or grows it) after an applied one.",
        "scaled = scaler.scale(loss); before = scaler.get_scale(); scaled.backward(); scaler.step(optimizer); "
        "scaler.update(); return scaler.get_scale() >= before.",
    ],
    "finetune_plan": [
        "With bf16 on the hardware, does any module need FP32? Without it, which modules are too close to 65504?",
        "The recorder's low_headroom rule: less than LOW_HEADROOM_BITS = 2 bits below 65504, i.e. peak > 65504 / 4; "
        "inf and NaN count as over (in float16; in bf16 nothing is kept).",
        "return ('bfloat16', []) if bf16 else ('float16', [n for n, p in peaks.items() if not p <= 65504 / 4]).",
    ],
}
hint = hints(__name__, HINTS)
