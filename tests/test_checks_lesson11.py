"""Exercise 11's checks: each typical wrong answer is caught and named; answers written otherwise pass."""

import collections
import math
import typing
import weakref
from decimal import Decimal
from fractions import Fraction

import grader_fixtures
import numpy as np
import torch

from ampcourse.checks import lesson11 as check

ANSWERS = dict(check.ANSWERS)


def _with(trace, answer):
    table = dict(ANSWERS, **{trace: answer})
    return lambda name: table[name]


# --- Task 1: diagnose ----------------------------------------------------------------------------------------

def diagnose_as_dicts(trace):
    kind, where, fix = ANSWERS[trace]
    return {"kind": kind, "where": where, "fix": fix}


def diagnose_spelt_loosely(trace):
    kind, where, fix = ANSWERS[trace]
    return [f" {kind.upper()} ", f"{where} ", fix.upper()]


Diagnosis = collections.namedtuple("Diagnosis", "kind where fix")


class TypedDiagnosis(typing.NamedTuple):
    kind: str
    where: str
    fix: str


def diagnose_as_namedtuples(trace):  # review rev24-r7 finding 7: "a tuple (kind, where, fix)" — a namedtuple is one
    return Diagnosis(*ANSWERS[trace])


def diagnose_as_typed_namedtuples(trace):
    return TypedDiagnosis(*ANSWERS[trace])


InOtherOrder = collections.namedtuple("InOtherOrder", "fix kind where")


def diagnose_as_namedtuples_in_another_order(trace):  # its fields are named: read by name, not by position
    kind, where, fix = ANSWERS[trace]
    return InOtherOrder(kind=kind, where=where, fix=fix)


OtherNames = collections.namedtuple("OtherNames", "kind module fix")
Remedy = collections.namedtuple("Remedy", "finding where remedy")


def diagnose_as_namedtuples_named_otherwise(trace):  # review rev24-r10 #1: no field is "where": read by position
    return OtherNames(*ANSWERS[trace])


def diagnose_as_namedtuples_with_other_names_for_two(trace):
    return Remedy(*ANSWERS[trace])


WhereFirst = collections.namedtuple("WhereFirst", "where kind remedy")


def diagnose_as_namedtuples_where_first(trace):  # review rev24-r11 N1: read by position, so the order is the mistake
    kind, where, fix = ANSWERS[trace]
    return WhereFirst(where, kind, fix)


D4 = collections.namedtuple("D4", "trace kind module fix")


def diagnose_with_a_fourth_field(trace):  # review rev24-r12 N1: four fields; no order of them would be read right
    kind, where, fix = ANSWERS[trace]
    return D4(trace, kind, where, fix)


class Agreeable(tuple):
    """A tuple subclass whose comparisons say yes to anything: read by tuple's own code, it cannot pass."""

    def __eq__(self, other):
        return True

    __hash__ = tuple.__hash__

    def __iter__(self):
        return iter(ANSWERS["A"])

    def __getitem__(self, i):
        return ANSWERS["A"][i]


def diagnose_agreeable(trace):
    return Agreeable(("nonfinite_loss", "loss", "fp32_loss")) if trace == "A" else ANSWERS[trace]


class Word(str):
    def __eq__(self, other):
        return True

    __hash__ = str.__hash__


def diagnose_namedtuple_of_str_subclasses(trace):
    return Diagnosis(*(Word(v) for v in ANSWERS[trace]))


# --- Task 2: applied_step ------------------------------------------------------------------------------------

def applied_strictly_greater(scaler, optimizer, loss):
    scaled = scaler.scale(loss)
    before = scaler.get_scale()
    scaled.backward()
    scaler.step(optimizer)
    scaler.update()
    return scaler.get_scale() > before


def applied_read_before_update(scaler, optimizer, loss):
    scaled = scaler.scale(loss)
    before = scaler.get_scale()
    scaled.backward()
    scaler.step(optimizer)
    after = scaler.get_scale()
    scaler.update()
    return after >= before


def applied_from_step_return(scaler, optimizer, loss):
    scaler.scale(loss).backward()
    result = scaler.step(optimizer)
    scaler.update()
    return result is None


def applied_without_update(scaler, optimizer, loss):
    scaled = scaler.scale(loss)
    before = scaler.get_scale()
    scaled.backward()
    scaler.step(optimizer)
    return scaler.get_scale() >= before


def applied_private(scaler, optimizer, loss):
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    found = sum(v.item() for v in scaler._per_optimizer_states[id(optimizer)]["found_inf_per_device"].values())
    scaler.update()
    return found == 0


def applied_unscaled_backward(scaler, optimizer, loss):
    before = scaler.get_scale()
    loss.backward()
    optimizer.zero_grad()
    scaler.step(optimizer)
    scaler.update()
    return scaler.get_scale() >= before


_FIRST_SCALE = weakref.WeakKeyDictionary()  # by the scaler itself: a freed scaler's id() comes back


def applied_remembers_the_first_scale(scaler, optimizer, loss):
    scaled = scaler.scale(loss)
    before = _FIRST_SCALE.setdefault(scaler, scaler.get_scale())
    scaled.backward()
    scaler.step(optimizer)
    scaler.update()
    return scaler.get_scale() >= before


def applied_scale_not_one(scaler, optimizer, loss):
    scaled = scaler.scale(loss)
    before = scaler.get_scale()
    scaled.backward()
    scaler.step(optimizer)
    scaler.update()
    return scaler.get_scale() >= before and scaler.is_enabled()


def applied_by_hook(scaler, optimizer, loss):
    ran = []
    handle = optimizer.register_step_post_hook(lambda *args: ran.append(True))
    try:
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    finally:
        handle.remove()
    return bool(ran)


def applied_getattr_private(scaler, optimizer, loss):
    scaled = scaler.scale(loss)
    scaled.backward()
    before = float(getattr(scaler, "_scale")) if scaler.is_enabled() else 1.0  # noqa: B009
    scaler.step(optimizer)
    scaler.update()
    return scaler.get_scale() >= before


def applied_vars_private(scaler, optimizer, loss):
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    states = vars(scaler)["_per_optimizer_states"][id(optimizer)]
    found = sum(v.item() for v in states["found_inf_per_device"].values())
    scaler.update()
    return found == 0


def applied_loss_finite(scaler, optimizer, loss):
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    return bool(torch.isfinite(loss))


def applied_always(scaler, optimizer, loss):
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    return True


def applied_with_a_comment_on_the_private_scale(scaler, optimizer, loss):
    scaled = scaler.scale(loss)
    before = scaler.get_scale()  # public: reads scaler._scale for me, which I must not touch
    scaled.backward()
    scaler.step(optimizer)
    scaler.update()
    return scaler.get_scale() >= before


def applied_not_smaller(scaler, optimizer, loss):
    scaled = scaler.scale(loss)
    before = scaler.get_scale()
    scaled.backward()
    scaler.step(optimizer)
    scaler.update()
    return not scaler.get_scale() < before


def applied_step_is_not_none(scaler, optimizer, loss):
    scaler.scale(loss).backward()
    applied = scaler.step(optimizer) is not None
    scaler.update()
    return applied


def applied_never(scaler, optimizer, loss):
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    return False


def applied_scale_read_before_scale(scaler, optimizer, loss):
    before = scaler.get_scale()  # before scale(): init_scale as given, not the float32 the scaler uses
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    return scaler.get_scale() >= before


def applied_weights_moved(scaler, optimizer, loss):  # review rev24-r4 finding 1: wrong at lr=0
    params = [p for group in optimizer.param_groups for p in group["params"]]
    before = [p.detach().clone() for p in params]
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    return any(not torch.equal(a, p) for a, p in zip(before, params, strict=True))


def applied_validates_its_input(scaler, optimizer, loss):
    if not isinstance(scaler, torch.amp.GradScaler):
        raise TypeError(f"scaler must be a torch.amp.GradScaler (got {type(scaler).__name__})")
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"optimizer must be a torch.optim.Optimizer (got {type(optimizer).__name__})")
    scaled = scaler.scale(loss)
    before = scaler.get_scale()
    scaled.backward()
    scaler.step(optimizer)
    scaler.update()
    return not scaler.get_scale() < before


def applied_hook_and_scale(scaler, optimizer, loss):
    ran = []
    handle = optimizer.register_step_post_hook(lambda *args: ran.append(True))
    try:
        scaled = scaler.scale(loss)
        before = torch.tensor(scaler.get_scale(), dtype=torch.float32)
        scaled.backward()
        scaler.step(optimizer)
        scaler.update()
    finally:
        handle.remove()
    return bool(ran) and bool(torch.tensor(scaler.get_scale(), dtype=torch.float32) >= before)


def applied_grads_finite(scaler, optimizer, loss):  # review rev24-r3 finding 6 (W1)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    finite = all(bool(torch.isfinite(p.grad).all()) for group in optimizer.param_groups for p in group["params"]
                 if p.grad is not None)
    scaler.step(optimizer)
    scaler.update()
    return finite


def applied_grads_finite_or_scale(scaler, optimizer, loss):
    scaled = scaler.scale(loss)
    before = scaler.get_scale()
    scaled.backward()
    scaler.unscale_(optimizer)
    finite = all(bool(torch.isfinite(p.grad).all()) for p in optimizer.param_groups[0]["params"])
    scaler.step(optimizer)
    scaler.update()
    return finite if not scaler.is_enabled() else scaler.get_scale() >= before


def applied_loss_finite_when_disabled(scaler, optimizer, loss):  # review rev24-r7 finding 12
    scaled = scaler.scale(loss)
    before = scaler.get_scale()
    scaled.backward()
    scaler.step(optimizer)
    scaler.update()
    return scaler.get_scale() >= before if scaler.is_enabled() else bool(torch.isfinite(loss))


def applied_by_state_dict(scaler, optimizer, loss):
    scaled = scaler.scale(loss)
    before = scaler.state_dict().get("scale", 1.0)
    scaled.backward()
    scaler.step(optimizer)
    scaler.update()
    return scaler.state_dict().get("scale", 1.0) >= before


# --- Task 3: finetune_plan -----------------------------------------------------------------------------------

LIMIT = float(torch.finfo(torch.float16).max)


def plan_only_overflowed(peaks, bf16):
    return ("bfloat16", []) if bf16 else ("float16", [n for n, p in peaks.items() if not p <= LIMIT])


def plan_at_or_above(peaks, bf16):
    return ("bfloat16", []) if bf16 else ("float16", [n for n, p in peaks.items() if not p < LIMIT / 4])


def plan_two_to_the_14(peaks, bf16):  # review rev24-r3 E3: 2**14 taken for 65504 / 4
    return ("bfloat16", []) if bf16 else ("float16", [n for n, p in peaks.items() if not p <= 2.0**14])


def plan_always_fp16(peaks, bf16):
    return "float16", [n for n, p in peaks.items() if not p <= LIMIT / 4]


def plan_islands_in_bf16(peaks, bf16):
    return ("bfloat16" if bf16 else "float16"), [n for n, p in peaks.items() if not p <= LIMIT / 4]


def plan_drops_nan(peaks, bf16):
    return ("bfloat16", []) if bf16 else ("float16", [n for n, p in peaks.items() if p > LIMIT / 4])


def _plan_log2_of_every_peak(peaks, bf16):
    if bf16:
        return "bfloat16", []
    return "float16", [n for n, p in peaks.items() if not math.isfinite(p) or math.log2(65504 / p) < 2]


def _plan_log2_zero_guarded(peaks, bf16):  # review rev24-r13 W3: a peak of 0 thought of, inf not (log2(0) raises)
    if bf16:
        return "bfloat16", []
    return "float16", [n for n, p in peaks.items() if p != 0 and (math.isnan(p) or math.log2(65504 / p) < 2)]


def _plan_int_of_the_peak(peaks, bf16):  # review rev24-r14 E2: 0 and inf handled, int(nan) raises
    if bf16:
        return "bfloat16", []
    return "float16", [n for n, p in peaks.items() if math.isinf(p) or (p != 0 and int(p) * 4 > 65504)]


def _plan_decimal_log(peaks, bf16):  # review rev24-r15 W1: Decimal(0) divides: decimal.DivisionByZero
    if bf16:
        return "bfloat16", []
    return "float16", [n for n, p in peaks.items()
                       if p != p or (Decimal(65504) / Decimal(p)).ln() / Decimal(2).ln() < 2]


def _plan_fraction_ratio(peaks, bf16):  # review rev24-r15 W1: NaN and inf guarded, Fraction(M) / Fraction(0) raises
    if bf16:
        return "bfloat16", []
    return "float16", [n for n, p in peaks.items() if p != p or p == math.inf or Fraction(65504) / Fraction(p) < 4]


def _plan_fraction_inf(peaks, bf16):  # review rev24-r16 W1: NaN guarded, inf not: Fraction(inf) raises OverflowError
    if bf16:
        return "bfloat16", []
    return "float16", [n for n, p in peaks.items() if p != p or (p != 0 and Fraction(65504) / Fraction(p) < 4)]


def _plan_numpy_raising(peaks, bf16):  # review rev24-r16 W1: np.errstate(all="raise"): log2(65504 / inf) raises
    import numpy as np

    if bf16:
        return "bfloat16", []
    with np.errstate(all="raise"):
        return "float16", [n for n, p in peaks.items()
                           if p != p or (p != 0 and np.log2(np.float64(65504) / np.float64(p)) < 2)]


def _plan_numpy_int_of_nan(peaks, bf16):  # review rev24-r17 E1: inf and 0 handled; a NaN cast to int raises
    import numpy as np

    if bf16:
        return "bfloat16", []
    keep = []
    with np.errstate(all="raise"):
        for n, p in peaks.items():
            if math.isinf(p):
                keep.append(n)
            elif p != 0 and np.floor(np.log2(np.float64(65504) / np.float64(p))).astype(np.int64) < 2:
                keep.append(n)
    return "float16", keep


def _plan_bf16_max_headroom(peaks, bf16):  # review rev24-r17 M1: the 2-bit rule against bf16's own max
    if not bf16:
        return "float16", [n for n, p in peaks.items() if not math.isfinite(p) or (p != 0 and math.log2(65504 / p) < 2)]
    return "bfloat16", [n for n, p in peaks.items() if p != 0 and (p != p or math.log2(3.38953e38 / p) < 2)]


def _plan_squeezed(peaks, bf16):  # review rev24-r19 E1: a habitual .squeeze(): a 0-d tensor for one module
    if bf16:
        return "bfloat16", []
    p = torch.tensor(list(peaks.values()), dtype=torch.float64).squeeze()
    return "float16", [n for n, v in zip(peaks, p, strict=True) if not v <= 65504 / 4]


def _plan_mutable_default(peaks, bf16, keep=[]):  # noqa: B006  (review rev24-r19 E2: the mistake itself)
    if bf16:
        return "bfloat16", []
    keep += [n for n, p in peaks.items() if not p <= 65504 / 4 and n not in keep]
    return "float16", keep


_PLAN_CACHE: dict = {}


def _plan_cached_by_name(peaks, bf16):  # review rev24-r19 W3: a verdict per module name kept between calls
    if bf16:
        return "bfloat16", []
    for n, p in peaks.items():
        _PLAN_CACHE.setdefault(n, not p <= 65504 / 4)
    return "float16", [n for n in peaks if _PLAN_CACHE[n]]


def _plan_bf16_log_of_all(peaks, bf16):  # review rev24-r19 W2: the bf16 branch raises on inf and NaN alike
    limit = 3.38953e38 if bf16 else 65504
    keep = []
    for n, p in peaks.items():
        if not bf16 and not math.isfinite(p):
            keep.append(n)
        elif p != 0 and (bf16 and not math.isfinite(p) and math.sqrt(-1) or math.log2(limit / p) < 2):
            keep.append(n)
    return ("bfloat16", []) if bf16 and not keep else ("bfloat16" if bf16 else "float16", keep)


def _plan_log2_bf16_too(peaks, bf16):  # review rev24-r16 N1: inf handled in the float16 branch only
    if bf16:
        return "bfloat16", [n for n in peaks if math.log2(65504 / peaks[n]) < -100]
    return "float16", [n for n, p in peaks.items() if not math.isfinite(p) or (p != 0 and math.log2(65504 / p) < 2)]


def plan_sorted(peaks, bf16):
    return ("bfloat16", []) if bf16 else ("float16", sorted(n for n, p in peaks.items() if not p <= LIMIT / 4))


def plan_everything(peaks, bf16):
    return ("bfloat16", []) if bf16 else ("float16", list(peaks))


def plan_short_bf16(peaks, bf16):
    return ("bf16", []) if bf16 else ("float16", [n for n, p in peaks.items() if not p <= LIMIT / 4])


def plan_short_fp16(peaks, bf16):
    return ("bfloat16", []) if bf16 else ("fp16", [n for n, p in peaks.items() if not p <= LIMIT / 4])


def plan_with_log2(peaks, bf16):
    if bf16:
        return torch.bfloat16, []
    keep = []
    for name, peak in peaks.items():
        if not math.isfinite(peak) or (peak > 0 and math.log2(LIMIT / peak) < 2):
            keep.append(name)
    return torch.float16, keep


def plan_with_recorder_constant(peaks, bf16):
    from ampcourse.recorder import LOW_HEADROOM_BITS

    if bf16:
        return ("bfloat16", ())
    return ("float16", tuple(n for n, p in peaks.items() if math.isnan(p) or p * 2**LOW_HEADROOM_BITS > LIMIT))


def plan_nonfinite_kept_in_bf16(peaks, bf16):
    if bf16:
        return "bfloat16", [n for n, p in peaks.items() if not math.isfinite(p)]
    return "float16", [n for n, p in peaks.items() if not p <= LIMIT / 4]


def plan_rule_against_bf16_max(peaks, bf16):
    largest = float(torch.finfo(torch.bfloat16 if bf16 else torch.float16).max)
    return ("bfloat16" if bf16 else "float16"), [n for n, p in peaks.items() if not p <= largest / 4]


def plan_reversed(peaks, bf16):  # review rev24-r5 E1: the comparison the wrong way round
    return ("bfloat16", []) if bf16 else ("float16", [n for n, p in peaks.items() if p <= LIMIT / 4])


def plan_reversed_strict(peaks, bf16):
    return ("bfloat16", []) if bf16 else ("float16", [n for n, p in peaks.items() if p < LIMIT / 4])


def plan_sixteen_thousand(peaks, bf16):  # review rev24-r5 W2: the limit rounded to "16k"
    return ("bfloat16", []) if bf16 else ("float16", [n for n, p in peaks.items() if not p <= 16000])


def plan_sixteen_three_hundred(peaks, bf16):
    return ("bfloat16", []) if bf16 else ("float16", [n for n, p in peaks.items() if not p <= 16300])


def plan_one_bit(peaks, bf16):
    return ("bfloat16", []) if bf16 else ("float16", [n for n, p in peaks.items() if not p <= LIMIT / 2])


def plan_three_bits(peaks, bf16):  # review rev24-r4 finding 2: each too-low threshold was blamed on >=
    return ("bfloat16", []) if bf16 else ("float16", [n for n, p in peaks.items() if not p <= LIMIT / 8])


def plan_round_ten_thousand(peaks, bf16):
    return ("bfloat16", []) if bf16 else ("float16", [n for n, p in peaks.items() if not p <= 10000])


def plan_natural_log(peaks, bf16):
    return ("bfloat16", []) if bf16 else ("float16", [n for n, p in peaks.items()
                                                      if not math.isfinite(p) or math.log(LIMIT / p) < 2])


def plan_fifth_of_the_limit(peaks, bf16):
    return ("bfloat16", []) if bf16 else ("float16", [n for n, p in peaks.items() if not p / LIMIT <= 0.2])


def plan_nothing(peaks, bf16):
    return ("bfloat16" if bf16 else "float16"), []


def plan_with_module_stats(peaks, bf16):
    from ampcourse.recorder import LOW_HEADROOM_BITS, ModuleStats

    if bf16:
        return "bfloat16", []
    stats = [ModuleStats(name, "", peak, LIMIT) for name, peak in peaks.items()]
    return "float16", [m.name for m in stats if math.isnan(m.peak) or m.headroom_bits < LOW_HEADROOM_BITS]


WRONG = {
    ("11", "diagnose"): {
        "a dict without 'fix' (review rev25-r8 N1)": (
            lambda trace: {"kind": ANSWERS[trace][0], "where": ANSWERS[trace][1]},
            "returned {'kind': 'overflow', 'where': 'encoder.layers.5.ffn.wo'}: the dict has no 'fix'"),
        "A: the NaN loss, a symptom": (_with("A", ("nonfinite_loss", "loss", "fp32_loss")), "symptom"),
        "A: the collapsing scale": (_with("A", ("scale_collapse", "scaler", "larger_scale")), "no loss scale"),
        "A: the parent module": (_with("A", ("overflow", "encoder.layers.5", "bf16_or_fp32_island")),
                                 "spelt exactly as the trace spells it"),
        "A: a larger scale for an overflow": (_with("A", ("overflow", "encoder.layers.5.ffn.wo", "larger_scale")),
                                              "does not remove the cause"),
        "A: SDPA for a feed-forward layer": (_with("A", ("overflow", "encoder.layers.5.ffn.wo", "sdpa")),
                                             "not attention"),
        "E: no scaler for an underflow": (_with("E", ("underflow", "embed.weight", "drop_scaler")), "must grow"),
        "B: frequent skips in bf16": (_with("B", ("frequent_skips", "scaler", "lower_lr")), "no step was skipped"),
        "C: lower lr for a summed loss": (_with("C", ("scale_collapse", "lm_head.weight", "lower_lr")),
                                          "instead of their mean"),
        "C: blames the loss": (_with("C", ("scale_collapse", "loss", "mean_loss")),
                               "where is the parameter in the `first inf/nan grad` column"),
        "C: bf16 for a summed loss": (_with("C", ("scale_collapse", "lm_head.weight", "bf16_or_fp32_island")),
                                      "would stop the overflow, but not the cause"),
        "A: the weight, not the module": (_with("A", ("overflow", "encoder.layers.5.ffn.wo.weight",
                                                      "bf16_or_fp32_island")),
                                          "the module in the `first inf/nan output` column"),
        "E: the module, not the parameter": (_with("E", ("underflow", "embed", "larger_scale")),
                                             "`grad lost > 50%` column"),
        "D: where is the optimizer": (_with("D", ("scheduler_on_skipped_step", "optimizer", "step_if_applied")),
                                      "where is 'scheduler'"),
        "C: frequent skips": (_with("C", ("frequent_skips", "lm_head.weight", "mean_loss")), "sum over 2**21"),
        "D: the start-up skips": (_with("D", ("frequent_skips", "scaler", "step_if_applied")), "look at the lr"),
        "E: unneeded scaler": (_with("E", ("unneeded_scaler", "scaler", "drop_scaler")), "stuck at 1"),
        "an unknown kind": (_with("B", ("bf16", "scaler", "drop_scaler")), "not a finding kind"),
        "a namedtuple (where, kind, remedy), read by position (rev24-r11 N1)": (
            diagnose_as_namedtuples_where_first,
            "your namedtuple's fields are (where, kind, remedy), but it is read by position, as (kind, where, fix)"),
        "a namedtuple of four fields (trace, kind, module, fix) (rev24-r12 N1)": (diagnose_with_a_fourth_field,
                                                                               "three strings"),
        "an unknown fix": (_with("D", ("scheduler_on_skipped_step", "scheduler", "fix the scheduler")),
                           "not one of the fixes"),
        "two values": (_with("E", ("underflow", "embed.weight")), "three strings"),
        "A: the NaN loss, in a tuple subclass whose == says yes": (diagnose_agreeable, "symptom"),
        "another trace's answer in str subclasses whose == says yes": (
            lambda trace: Diagnosis(*(Word(v) for v in check.ANSWERS["B" if trace != "B" else "A"])),
            "trace A: not 'unneeded_scaler'"),
    },
    ("11", "applied_step"): {
        "> instead of >=": (applied_strictly_greater, "compare with >="),
        "scale read before update()": (applied_read_before_update, "before update() and after it"),
        "scaler.step's return value": (applied_from_step_return, "return value"),
        "no update()": (applied_without_update, "call scaler.update()"),
        "private found_inf": (applied_private, "private attribute"),
        "unscaled backward": (applied_unscaled_backward, "backward must run on `scaler.scale(loss)`"),
        "first scale remembered": (applied_remembers_the_first_scale, "read the scale in this call"),
        "disabled scaler means skipped": (applied_scale_not_one, "disabled scaler"),
        "private _scale through getattr": (applied_getattr_private, "'_scale'"),
        "private state through vars()": (applied_vars_private, "private attribute"),
        "the loss is finite": (applied_loss_finite, "never reads the scale"),
        "always True": (applied_always, "never reads the scale"),
        "step post-hook: a fused optimizer's step() runs on a skip": (applied_by_hook, "fused optimizer"),
        "scaler.step(...) is not None": (applied_step_is_not_none, "never reads the scale"),
        "always False": (applied_never, "never reads the scale"),
        "finite gradients after unscale_": (applied_grads_finite, "a disabled scaler skips nothing"),
        "finite gradients when the scaler is disabled": (applied_grads_finite_or_scale,
                                                         "a disabled scaler skips nothing"),
        "a finite loss when the scaler is disabled": (applied_loss_finite_when_disabled,
                                                      "finite gradients or a finite loss are not the test"),
        "scale read before scaler.scale(loss)": (applied_scale_read_before_scale, "before scaler.scale(loss)"),
        "the weights moved": (applied_weights_moved, "a weight change is not the test"),
    },
    ("11", "finetune_plan"): {
        "only peaks above 65504": (plan_only_overflowed, "not only those already above 65504"),
        "exactly 2 bits counted low": (plan_at_or_above, "exactly 65504 / 4"),
        "fp16 even with bf16": (plan_always_fp16, "fine-tune in bf16"),
        "FP32 islands in bf16": (plan_islands_in_bf16, "empty list"),
        "NaN peaks dropped": (plan_drops_nan, "inf or nan"),
        "sorted names": (plan_sorted, "another order"),
        "log2 of 65504 / peak, a zero peak not thought of (review rev24-r11 W1)": (
            _plan_log2_of_every_peak, "has a peak of 0 (an all-zero output)"),
        "int() of a NaN peak, not the inf's fault (review rev24-r14 E2)": (
            _plan_int_of_the_peak, "raised ValueError: cannot convert float NaN to integer"),
        "Decimal(65504) / Decimal(0): decimal.DivisionByZero (review rev24-r15 W1)": (
            _plan_decimal_log, "'dropped' has a peak of 0 (an all-zero output)"),
        "Fraction(65504) / Fraction(0): ZeroDivisionError (review rev24-r15 W1)": (
            _plan_fraction_ratio, "'dropped' has a peak of 0 (an all-zero output)"),
        "Fraction(65504) / Fraction(inf): OverflowError (review rev24-r16 W1)": (
            _plan_fraction_inf, "'x' has a peak of inf: it has overflowed already"),
        "numpy under errstate(all='raise'): FloatingPointError (review rev24-r16 W1)": (
            _plan_numpy_raising, "'x' has a peak of inf: it has overflowed already"),
        "numpy's int of a NaN peak, not the inf's fault (review rev24-r17 E1)": (
            _plan_numpy_int_of_nan, "raised FloatingPointError: invalid value encountered in cast"),
        "headroom against bf16's max, inf not handled (review rev24-r17 M1)": (
            _plan_bf16_max_headroom, "With bf16, return ('bfloat16', []) whatever the peaks"),
        "squeezed into a 0-d tensor for one module (review rev24-r19 E1)": (
            _plan_squeezed, "iteration over a 0-d tensor"),
        "a mutable default list (review rev24-r19 E2)": (_plan_mutable_default, "are not modules of these peaks"),
        "a verdict cached per module name (review rev24-r19 W3)": (_plan_cached_by_name, "'head'"),
        "the bf16 branch raising on NaN too (review rev24-r19 W2)": (
            _plan_bf16_log_of_all, "With bf16, return ('bfloat16', []) whatever the peaks"),
        "log2 of every peak in the bf16 branch (review rev24-r16 N1)": (
            _plan_log2_bf16_too, "'attn' has a peak of inf, and with bf16 no module is kept in FP32"),
        "log2 with a zero peak guarded, inf not (review rev24-r13 W3)": (
            _plan_log2_zero_guarded, "has a peak of inf: it has overflowed already"),
        "every module": (plan_everything, "not every module"),
        "bf16 spelt short": (plan_short_bf16, "return 'bfloat16'"),
        "fp16 spelt short": (plan_short_fp16, "return 'float16'"),
        "inf/NaN modules kept in FP32 under bf16": (plan_nonfinite_kept_in_bf16, "in bf16 no module needs fp32"),
        "the 2-bit rule against bf16's max": (plan_rule_against_bf16_max, "in bf16 no module needs fp32"),
        "a 1-bit threshold (peak > 65504 / 2)": (plan_one_bit, "b at 16392.4 (1.9986 bits below 65504)"),
        "2**14 for 65504 / 4": (plan_two_to_the_14, "d at 16380 (1.9996 bits below 65504)"),
        "nothing kept": (plan_nothing, "240000 (above 65504)"),
        "a 3-bit threshold (peak > 65504 / 8)": (plan_three_bits, "'p' at 14000: log2(65504 / 14000) = 2.23 bits"),
        "a round 10000": (plan_round_ten_thousand, "the threshold is too low"),
        "the natural log, not log2": (plan_natural_log, "= 2.23 bits of headroom, 's' at 16200"),
        "0.2 of the limit for a quarter": (plan_fifth_of_the_limit, "peak > 65504 / 4 = 16376"),
        "the comparison reversed (p <= 65504 / 4)": (plan_reversed, "reverse the comparison"),
        "the comparison reversed (p < 65504 / 4)": (plan_reversed_strict, "reverse the comparison"),
        "16000 for 65504 / 4": (plan_sixteen_thousand, "kept 's' at 16200: log2(65504 / 16200) = 2.02 bits of "
                                                        "headroom, 't' at 16370"),
        "16300 for 65504 / 4": (plan_sixteen_three_hundred, "'t' at 16370: log2(65504 / 16370) = 2.0005 bits"),
    },
}

RIGHT = {
    ("11", "diagnose"): {
        "tuples from a table": lambda trace: check.ANSWERS[trace],
        "dicts": diagnose_as_dicts,
        "lists, other case and spaces": diagnose_spelt_loosely,
        "E: bf16 for the underflow": _with("E", ("underflow", "embed.weight", "bf16_or_fp32_island")),
        # the trace cannot tell a sum over 2**21 tokens from a leftover constant 2**21 (rev24-r6 #6)
        "C: drop the constant": _with("C", ("scale_collapse", "lm_head.weight", "drop_constant")),
        "namedtuples (rev24-r7 #7)": diagnose_as_namedtuples,
        "typing.NamedTuple": diagnose_as_typed_namedtuples,
        "a namedtuple with its fields named in another order": diagnose_as_namedtuples_in_another_order,
        "a namedtuple of fields (kind, module, fix), read by position": diagnose_as_namedtuples_named_otherwise,
        "a namedtuple of fields (finding, where, remedy), read by position":
            diagnose_as_namedtuples_with_other_names_for_two,
        # judged by its content: checks.plain turns a str subclass into its str (its own == never runs), and the
        # content here is right; a wrong content in such a class is refused ("symptom" above)
        "a namedtuple of str subclasses": diagnose_namedtuple_of_str_subclasses,
    },
    ("11", "applied_step"): {
        "scale comparison": applied_not_smaller,
        "validates its input, naming type(x).__name__": applied_validates_its_input,
        "step hook and the scale, as float32 tensors": applied_hook_and_scale,
        "a comment naming scaler._scale": applied_with_a_comment_on_the_private_scale,
        "the scale from state_dict() (empty when disabled)": applied_by_state_dict,
        "a numpy bool (review rev25-r8 N3)": lambda *args: np.bool_(applied_not_smaller(*args)),
    },
    ("11", "finetune_plan"): {
        "log2 headroom, torch dtypes": plan_with_log2,
        "the recorder's constant, tuples": plan_with_recorder_constant,
        "the recorder's ModuleStats.headroom_bits": plan_with_module_stats,
    },
}

test_wrong_answer_is_named, test_right_answer_passes = grader_fixtures.tests(WRONG, RIGHT)


def test_every_trace_has_an_answer_with_a_known_kind_and_fix():
    assert set(check.TRACES) == set(check.ANSWERS)
    for kind, _, fix in check.ANSWERS.values():
        assert kind in check.KINDS and fix in check.FIXES


def test_trace_a_points_at_the_module_its_answer_names():
    assert {row["first inf/NaN output"] for row in check.TRACES["A"]} == {check.ANSWERS["A"][1]}


def test_the_plan_rule_keeps_nan_and_inf_and_not_exactly_two_bits():
    assert check.plan_rule({"a": LIMIT / 4, "b": math.nan, "c": math.inf}, False) == ("float16", ["b", "c"])


# The key of each trace must agree with the course's own scale rule, which the recorder applies
# (recorder._scale_findings: collapsing or a final scale below 1 -> scale_collapse, unstable -> frequent_skips).
SCALE_STATUS = {"A": "collapsing", "B": "healthy", "C": "collapsing", "D": "healthy", "E": "healthy"}


def test_each_trace_scale_history_reads_as_its_key_says():
    from ampcourse.diagnostics import diagnose_scale

    for trace, status in SCALE_STATUS.items():
        assert diagnose_scale(check.scale_history(trace)).status == status, trace
        kind = check.ANSWERS[trace][0]
        if kind == "scale_collapse":
            assert status == "collapsing"
        assert kind != "frequent_skips"
    # A collapses too, but its forward output is inf first: the recorder names the overflow as the cause
    assert all(row["first inf/NaN output"] for row in check.TRACES["A"])
    # C: nothing in the forward, the first non-finite gradient is where the key points
    assert {row["first inf/NaN grad"] for row in check.TRACES["C"]} == {check.ANSWERS["C"][1]}
    assert not any(row["first inf/NaN output"] for row in check.TRACES["C"])


def test_trace_c_loss_is_a_sum_over_the_tokens_it_names():
    assert all(row["loss"] > check.SUMMED_TOKENS for row in check.TRACES["C"])


def test_the_private_name_detector_reads_code_not_comments():
    assert check._private(applied_getattr_private) == "'_scale'"
    assert check._private(applied_private) == "._per_optimizer_states"
    assert check._private(applied_with_a_comment_on_the_private_scale) is None
    assert check._private(applied_validates_its_input) is None  # type(x).__name__ is no private attribute


def test_a_message_blames_only_the_mistake_the_answer_made():
    from ampcourse.checks import CheckFailed

    for answer in (plan_one_bit, plan_nothing, plan_three_bits, plan_round_ten_thousand, plan_natural_log,
                   plan_fifth_of_the_limit):
        try:
            check.finetune_plan(answer)
        except CheckFailed as failed:
            assert "not only those already above 65504" not in str(failed), answer.__name__
            assert "exactly 65504 / 4" not in str(failed), answer.__name__  # only the >= slip is told that
        else:
            raise AssertionError(f"{answer.__name__} passed")


def test_the_where_list_names_every_kind_not_only_the_answers():
    """Review rev24-r4 finding 6: the list printed with the traces named exactly the five answer kinds."""
    assert set(check.WHERE) == set(check.KINDS) - {"healthy"}
    assert {kind for kind, _, _ in check.ANSWERS.values()} < set(check.WHERE)


def test_the_wrong_where_message_reads_as_a_sentence():
    """Review rev24-r4 finding 9: no "for a overflow"; an object's where is not "as the trace spells it"."""
    from ampcourse.checks import CheckFailed

    for trace, where in (("A", "encoder.layers.5"), ("B", "GradScaler"), ("E", "embed")):
        kind = check.ANSWERS[trace][0]
        try:
            check.diagnose(_with(trace, (kind, where, check.ANSWERS[trace][2])))
        except CheckFailed as failed:
            text = str(failed)
            assert f"for {kind}, where is" in text and "for a " not in text, text
            assert ("spelt exactly as the trace spells it" in text) == (trace != "B"), text
        else:
            raise AssertionError(f"trace {trace}: where={where!r} passed")
    assert "'loss'" not in check.HINTS["diagnose"][2]


def test_r9_9_trace_c_starts_where_a_summed_losss_logit_gradient_cannot_overflow_where_it_enters():
    """Review rev24-r9 finding 9: trace C's loss is a sum, so each logit gradient is p - y (at most 1 in size); at
    scale 65536 a token with p(target) < 4.9e-4 would make it inf where it enters the model, and the trace's own
    column would then read `loss`. Every row's scale keeps scale × 1 within float16."""
    assert all(row["scale"] <= check.FP16_MAX for row in check.TRACES["C"])
    assert check.TRACES["C"][0]["scale"] == 2.0**15
