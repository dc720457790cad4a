"""Exercise 09: the check passes the right step and names each typical wrong one (the fixtures)."""

import inspect
import math
import statistics
import sys
from collections.abc import Mapping

import grader_fixtures
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from ampcourse import capstone
from ampcourse.checks import CheckFailed, NotStarted, lesson09


def step(divide=True, zero_grad="start", clip="after unscale_", stepper="scaler", scheduler_on="applied",
         unscale=True, record="right", empty="check", autocast_dtype=None, loss_outside=False, divisor=None,
         autocast_device="input's", stepped_from="scale"):
    """A train_window with one mistake switched on (the defaults are the right answer)."""
    def train_window(model, optimizer, scaler, scheduler, micro_batches, max_norm, dtype):
        if not micro_batches:
            if empty == "check":
                raise ValueError("micro_batches must hold at least one (x, y) pair")
            if empty == "unnamed":
                raise ValueError("empty window")
            if empty == "return":
                return {"stepped": False, "grad_norm": 0.0, "loss": 0.0}
            if empty == "zero_grad first":
                optimizer.zero_grad(set_to_none=True)
                raise ValueError("micro_batches must hold at least one (x, y) pair")
        if zero_grad == "start":
            optimizer.zero_grad(set_to_none=True)
        device_type = micro_batches[0][0].device.type  # IndexError on an empty window (empty="index")
        if autocast_device == "other":  # e.g. torch.autocast("cuda", ...) on CPU tensors: autocast stays off
            device_type = "cuda" if device_type == "cpu" else "cpu"
        total, last, undivided = 0.0, 0.0, 0.0
        for x, y in micro_batches:
            if zero_grad == "every micro-batch":
                optimizer.zero_grad(set_to_none=True)
            run_dtype = autocast_dtype or dtype
            with torch.autocast(device_type=device_type, dtype=run_dtype, enabled=run_dtype != torch.float32):
                out = model(x)
                if not loss_outside:
                    loss = F.cross_entropy(out, y)
            if loss_outside:
                loss = F.cross_entropy(out, y)  # on the float16 logits, outside autocast: a float16 loss
            undivided += loss.item()
            if divide:
                loss = loss / (divisor or len(micro_batches))
            total, last = total + loss.item(), loss
            scaler.scale(loss).backward()
        if zero_grad == "before step":
            optimizer.zero_grad(set_to_none=True)
        norm = None
        if record == "norm before unscale_":
            norm = torch.nn.utils.get_total_norm([p.grad for p in model.parameters()])
        if clip == "before unscale_":
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        if unscale:
            scaler.unscale_(optimizer)
        if clip == "after unscale_":
            clipped = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
            norm = clipped if norm is None else norm
        if norm is None or record == "norm after clip":
            norm = torch.nn.utils.get_total_norm([p.grad for p in model.parameters()])
        before = scaler.get_scale()
        if scheduler_on == "before step":
            scheduler.step()
        if stepper == "scaler":
            scaler.step(optimizer)
        else:
            optimizer.step()
        scaler.update()
        stepped = scaler.get_scale() >= before
        schedule_when = scheduler_on
        if stepped_from != "scale":  # review rev25-r8 W1: "skipped" read from the gradients, not from the scale
            schedule_when = "stepped" if stepped_from == "finite norm, scheduler too" else scheduler_on
            stepped = bool(torch.isfinite(norm))
        if schedule_when == "stepped" and stepped:
            scheduler.step()
        if schedule_when == "always" or (schedule_when == "applied" and scaler.get_scale() >= before) or (
                schedule_when == "scale unchanged" and scaler.get_scale() == before):
            scheduler.step()
        out = {"stepped": stepped, "grad_norm": norm.item(), "loss": total}
        if record == "none":
            return None
        if record == "tuple":
            return stepped, norm.item(), total
        if record == "no loss":
            del out["loss"]
        if record == "norm tensor":
            out["grad_norm"] = norm
        if record == "scaled loss":
            out["loss"] = total * before  # the window's loss × the scale
        if record == "last loss":
            out["loss"] = last.item()
        if record == "losses not divided":
            out["loss"] = undivided
        if record == "stepped always":
            out["stepped"] = True
        if record == "numpy bool":  # scales compared as numpy numbers (review rev25-r9 N1)
            out["stepped"] = np.float64(scaler.get_scale()) >= np.float64(before)
        if record == "stepped only if scale unchanged":
            out["stepped"] = scaler.get_scale() == before
        if record == "finite norm on a skip":
            out["grad_norm"] = norm.item() if stepped else 0.0
        return out
    return train_window


def zero_grad_after_the_step(model, optimizer, scaler, scheduler, micro_batches, max_norm, dtype):
    record = step(zero_grad="never")(model, optimizer, scaler, scheduler, micro_batches, max_norm, dtype)
    optimizer.zero_grad(set_to_none=True)
    return record


def strict_train_window(model, optimizer, scaler, scheduler, micro_batches, max_norm, dtype):
    """Right, written otherwise: validates every argument first, float32 logits for the loss, scale compared
    with `<`, the norm from torch.nn.utils.get_total_norm before clip_grads_with_norm_."""
    if not isinstance(micro_batches, list) or not micro_batches:
        raise ValueError("micro_batches must be a non-empty list of (x, y) pairs")
    if not max_norm > 0:
        raise ValueError("max_norm must be positive")
    if dtype not in (torch.float16, torch.bfloat16, torch.float32):
        raise ValueError("dtype must be float16, bfloat16 or float32")
    optimizer.zero_grad()
    total = 0.0
    for x, y in micro_batches:
        with torch.amp.autocast(x.device.type, dtype=dtype, enabled=dtype is not torch.float32):
            logits = model(x)
        loss = F.cross_entropy(logits.float(), y) / len(micro_batches)
        total += float(loss)
        scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    norm = torch.nn.utils.get_total_norm(grads)
    torch.nn.utils.clip_grads_with_norm_(model.parameters(), max_norm, norm)
    before = scaler.get_scale()
    scaler.step(optimizer)
    scaler.update()
    skipped = scaler.get_scale() < before
    if not skipped:
        scheduler.step()
    return {"stepped": not skipped, "grad_norm": float(norm), "loss": total}


def lesson_code_pasted():
    """Lesson 09's printed train_window (signature and body, as its cell prints them), pasted with its imports."""
    from collections.abc import Sequence

    from torch import nn

    from ampcourse import capstone
    from ampcourse.scaler_run import step_was_skipped

    signature, _, body = inspect.getsource(capstone.train_window).split('"""')
    namespace = {"torch": torch, "nn": nn, "Sequence": Sequence, "step_was_skipped": step_was_skipped,
                 "_check_window": capstone._check_window}
    exec(signature.rstrip() + "\n" + body.lstrip("\n"), namespace)  # noqa: S102 - what a learner would paste
    return namespace["train_window"]


def test_the_course_function_and_the_lesson_code_fail_before_training():
    # Neither the import nor the paste ever gets a pass: the course's function returns nothing, and the check
    # says so before it trains (the message names what is missing).
    for fn in (capstone.train_window, lesson_code_pasted()):
        with pytest.raises(CheckFailed) as info:
            lesson09.train_window(fn)
        assert "return" in str(info.value) or "write your own" in str(info.value)
    assert capstone.train_window(*_tiny_window_args()) is None  # the course's version reports nothing


def _tiny_window_args():
    from ampcourse.checks.tiny import micro_batches, tiny_model

    model = tiny_model("cpu")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    scaler = torch.amp.GradScaler("cpu")
    return model, optimizer, scaler, scheduler, micro_batches("cpu", 2), 1.0, torch.float16


def test_stub_is_not_started():
    def train_window(model, optimizer, scaler, scheduler, micro_batches, max_norm, dtype):
        raise NotImplementedError("one optimizer step from the window; return what happened")
    with pytest.raises(NotStarted, match="not started"):
        lesson09.train_window(train_window)


@pytest.mark.parametrize("bad", [
    lambda *args: None,  # does nothing
    lambda *args: 1 / 0,  # raises
    lambda model, optimizer, *rest: optimizer.step(),  # steps without gradients
])
def test_odd_answers_fail_readably(bad):
    with pytest.raises(CheckFailed, match="Task 1"):
        lesson09.train_window(bad)
    with pytest.raises(CheckFailed, match="should be a function"):
        lesson09.train_window("train_window")


# --- Task 2: sample_weighted_window ----------------------------------------------------------------------------
def weighted(divide="rows", reduction="sum", autocast=torch.float16, one_backward=False, zero_grad=True):
    def sample_weighted_window(model, optimizer, scaler, micro_batches):
        rows = sum(len(y) for _, y in micro_batches)
        if zero_grad:
            optimizer.zero_grad()
        losses = []
        for x, y in micro_batches:
            with torch.autocast(device_type=x.device.type, dtype=autocast, enabled=autocast is not None):
                loss = F.cross_entropy(model(x), y, reduction=reduction)
            loss = {"rows": loss / rows, "count": loss / len(micro_batches), "none": loss,
                    "weighted mean": loss * len(y) / rows}[divide]
            if one_backward:
                losses.append(loss)
            else:
                scaler.scale(loss).backward()
        if one_backward:
            scaler.scale(sum(losses)).backward()
        scaler.step(optimizer)
        scaler.update()
    return sample_weighted_window


# --- Task 3: amp_verdict -------------------------------------------------------------------------------------------
class _HonestVerdict09(str):
    """A right answer's own str subclass (review rev25-r6 M1: judged by its content)."""


def verdict(paired=True, ddof=1, flip=False):
    def amp_verdict(fp32, amp):
        a, f = torch.tensor(amp, dtype=torch.float64), torch.tensor(fp32, dtype=torch.float64)
        if paired:
            d = a - f
            mean, se = d.mean().item(), d.std(correction=ddof).item() / len(d) ** 0.5
        else:
            mean = (a.mean() - f.mean()).item()
            se = ((a.var(correction=ddof) + f.var(correction=ddof)) / len(a)).sqrt().item()
        if flip:
            mean = -mean
        if abs(mean) <= 2 * se:
            return "within noise"
        return "amp better" if mean > 0 else "amp worse"
    return amp_verdict


def standard_errors(k, se_divisor=lambda n: math.sqrt(n)):
    """Paired differences judged against k standard errors (k may depend on the number of seeds)."""
    def amp_verdict(fp32, amp):
        d = [a - f for f, a in zip(fp32, amp, strict=True)]
        n, m = len(d), statistics.fmean(d)
        noise = (k(n) if callable(k) else k) * statistics.stdev(d) / se_divisor(n)
        return "within noise" if abs(m) <= noise else ("amp better" if m > 0 else "amp worse")
    return amp_verdict


ONE_SIDED_T = {1: 6.314, 2: 2.920, 3: 2.353, 4: 2.132, 5: 2.015}  # one-sided 95 % t, by degrees of freedom


def test_the_cases_near_two_standard_errors_are_judged_by_the_course_rule():
    # The re-review's cases: t ≈ 2.22, 2.69 (3 seeds), 2.06, 2.37 (5 seeds) are "amp better"; t ≈ 1.997 is noise.
    from ampcourse.checks.lesson09 import VERDICT_CASES

    cases = {what: (f, a) for f, a, what in VERDICT_CASES}
    want = {"AMP 0.1, 0.2 and 0.5 points higher on three seeds": (2.219, "amp better"),
            "AMP 0.1, 0.1 and 0.4 points higher on three seeds": (1.997, "within noise"),
            "AMP 0.2 lower to 0.7 points higher on five seeds": (2.058, "amp better"),
            "AMP 0.2 to 1.1 points higher on three seeds": (2.688, "amp better"),
            "AMP 0.2 lower to 0.6 points higher on five seeds": (2.369, "amp better")}
    for what, (t, verdict_) in want.items():
        f, a = cases[what]
        mean, error = capstone.paired_difference(f, a)
        assert abs(mean / error - t) < 1e-3, what
        assert capstone.paired_verdict(f, a) == verdict_, what


def lesson_rule_with_fp32_spread(fp32, amp):
    """The learner's rejected answer (learner review): paired differences, noise = max(2·SE, stdev(fp32))."""
    d = [a - f for f, a in zip(fp32, amp, strict=True)]
    noise = max(2 * statistics.stdev(d) / math.sqrt(len(d)), statistics.stdev(fp32))
    return "within noise" if abs(statistics.mean(d)) <= noise else ("amp better" if statistics.mean(d) > 0
                                                                    else "amp worse")


def same_sign_rule(fp32, amp):
    """Reviewer's case: 'every seed has the same sign' (it used to get the ddof message by coincidence)."""
    d = [a - f for f, a in zip(fp32, amp, strict=True)]
    if all(x > 0 for x in d):
        return "amp better"
    return "amp worse" if all(x < 0 for x in d) else "within noise"


def strict_rule(fp32, amp):
    d = [a - f for f, a in zip(fp32, amp, strict=True)]
    if abs(statistics.mean(d)) < 2 * statistics.stdev(d) / math.sqrt(len(d)):
        return "within noise"
    return "amp better" if statistics.mean(d) > 0 else "amp worse"


def t_test_rule(fp32, amp):
    """Review 08-09: a proper two-sided 95 % paired t-test (t critical values for df = 1..9)."""
    crit = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}
    d = [a - f for a, f in zip(amp, fp32, strict=True)]
    n = len(d)
    m = statistics.fmean(d)
    se = statistics.stdev(d) / math.sqrt(n)
    if abs(m) <= crit.get(n - 1, 2.0) * se:
        return "within noise"
    return "amp better" if m > 0 else "amp worse"


def two_standard_deviations(fp32, amp):
    d = [a - f for f, a in zip(fp32, amp, strict=True)]
    m = statistics.fmean(d)
    return "within noise" if abs(m) <= 2 * statistics.stdev(d) else ("amp better" if m > 0 else "amp worse")


def imports_the_course_rule(fp32, amp):
    """Review 08-09: the course's function imported inside the answer and called."""
    from ampcourse.capstone import paired_verdict
    return paired_verdict(fp32, amp)


def calls_the_course_rule_from_the_notebook(fp32, amp):
    return capstone.paired_verdict(fp32, amp)


def squares_no_sqrt(fp32, amp):
    """Right (review 08-09): mean² ≤ 4·var / n, no square root."""
    if len(fp32) != len(amp):
        raise ValueError("paired by seed: same length")
    n = len(fp32)
    d = [amp[i] - fp32[i] for i in range(n)]
    mean = sum(d) / n
    var = sum((x - mean) ** 2 for x in d) / (n - 1)
    if mean * mean <= 4 * var / n:
        return "within noise"
    return "amp better" if mean > 0 else "amp worse"


def test_no_two_wrong_verdict_rules_agree_on_every_case():
    from ampcourse.checks.lesson09 import VERDICT_CASES, WRONG_RULES

    table = {name: [rule(f, a) for f, a, _ in VERDICT_CASES] for name, (rule, _) in WRONG_RULES.items()}
    right = [capstone.paired_verdict(f, a) for f, a, _ in VERDICT_CASES]
    names = list(table)
    for i, first in enumerate(names):
        assert table[first] != right, first
        for second in names[i + 1:]:
            assert table[first] != table[second], (first, second)


def test_no_verdict_case_sits_on_the_two_standard_deviations_boundary():
    from ampcourse.checks.lesson09 import VERDICT_CASES

    for f, a, what in VERDICT_CASES:
        d = [y - x for x, y in zip(f, a, strict=True)]
        std = statistics.stdev(d)
        assert std == 0 or abs(abs(statistics.fmean(d)) / (2 * std) - 1) > 0.05, what


def test_verdict_failures_do_not_print_the_rule_in_full():
    from ampcourse.capstone import VERDICT_RULE

    for answer, _ in WRONG[("09", "amp_verdict")].values():
        with pytest.raises(CheckFailed) as failed:
            lesson09.amp_verdict(answer)
        assert VERDICT_RULE not in str(failed.value)


def t_statistic_with_guard(fp32, amp):
    """Right, written otherwise: numpy, a t statistic, identical runs handled before dividing."""
    d = np.asarray(amp) - np.asarray(fp32)
    se = d.std(ddof=1) / np.sqrt(d.size)
    if se == 0:
        return "within noise" if d.mean() == 0 else ("amp better" if d.mean() > 0 else "amp worse")
    t = d.mean() / se
    return "within noise" if abs(t) <= 2 else ("amp better" if t > 0 else "amp worse")


def t_statistic_unguarded(fp32, amp):
    d = np.asarray(amp, dtype=float) - np.asarray(fp32, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = d.mean() / (d.std(ddof=1) / math.sqrt(d.size))  # identical runs: 0 / 0
    return "within noise" if abs(t) <= 2 else ("amp better" if t > 0 else "amp worse")


def weighted_by_row_mean(model, optimizer, scaler, micro_batches):
    """Right, written otherwise: each micro-batch's mean loss weighted by its share of the rows; zero_grad on
    the model; the total counted with numel."""
    total = sum(y.numel() for _, y in micro_batches)
    model.zero_grad(set_to_none=True)
    for x, y in micro_batches:
        with torch.autocast(x.device.type, dtype=torch.float16):
            loss = F.cross_entropy(model(x), y) * (y.numel() / total)
        scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()


def weighted_last_batch_only_rows(model, optimizer, scaler, micro_batches):
    """Divides by the rows of the first micro-batch, as if every micro-batch had as many."""
    optimizer.zero_grad()
    for x, y in micro_batches:
        with torch.autocast(x.device.type, dtype=torch.float16):
            loss = F.cross_entropy(model(x), y, reduction="sum") / (len(micro_batches[0][1]) * len(micro_batches))
        scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()


def weighted_no_scaler_step(model, optimizer, scaler, micro_batches):
    rows = sum(len(y) for _, y in micro_batches)
    optimizer.zero_grad()
    for x, y in micro_batches:
        with torch.autocast(x.device.type, dtype=torch.float16):
            loss = F.cross_entropy(model(x), y, reduction="sum") / rows
        scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    optimizer.step()
    scaler.update()


class _FrameRecord(Mapping):
    """Review rev25-r7 E4: a read-only Mapping whose __getitem__ hands the check its own reference values."""

    def __init__(self, mine):
        self.mine = mine

    def __iter__(self):
        return iter(self.mine)

    def __len__(self):
        return len(self.mine)

    def __getitem__(self, key):
        v = sys._getframe(1).f_locals
        if key == "stepped" and "applied" in v:
            return v["applied"]
        if key == "grad_norm" and "true_norm" in v:
            return float(v["true_norm"])
        if key == "loss" and "losses" in v:
            return sum(v["losses"]) / len(v["losses"])
        return self.mine[key]


def _record_reads_the_frame(*args):
    step()(*args)  # the right training step; the record is fixed, read through the Mapping
    return _FrameRecord({"stepped": True, "grad_norm": 0.0, "loss": 0.0})


class _HonestRecord(Mapping):
    """An honest read-only record: a Mapping of its own over the right values (read into a dict by the check)."""

    def __init__(self, mine):
        self.mine = dict(mine)

    def __iter__(self):
        return iter(self.mine)

    def __len__(self):
        return len(self.mine)

    def __getitem__(self, key):
        return self.mine[key]


def _record_as_a_mapping(*args):
    return _HonestRecord(step()(*args))


WRONG = {
    ("09", "train_window"): {
        "a Mapping whose __getitem__ reads the check's frame (review rev25-r7 E4)": (
            _record_reads_the_frame, "'loss' is 0, the window's loss"),
        "imported from the course": (capstone.train_window,
                                     "this is ampcourse.capstone.train_window imported from the course"),
        "lesson 09's code pasted": (lesson_code_pasted(), "returned None: return a dict"),
        "dtype argument ignored (hard-coded float16)": (step(autocast_dtype=torch.float16),
                                                         "ignores its `dtype` argument"),
        "loss computed outside autocast": (step(loss_outside=True), "computed the cross-entropy outside autocast"),
        "divides by a fixed 3 (short last window)": (step(divisor=3), "short last window of 1 micro-batch"),
        "empty window: zero_grad before raising": (step(empty="zero_grad first"),
                                                   "an empty window ran `zero_grad` before raising"),
        "scheduler stepped on a skipped step": (step(scheduler_on="always"),
                                                "you stepped the scheduler on a skipped step"),
        "clipping before unscale_": (step(clip="before unscale_"), "you clipped before `unscale_`"),
        "forgot loss / window length": (step(divide=False), "forgot to divide each micro-batch"),
        "zero_grad inside the loop": (step(zero_grad="every micro-batch"),
                                      "ran between the micro-batches of one window"),
        "zero_grad between backward and step": (step(zero_grad="before step"), "after the backward passes and before"),
        "no zero_grad": (step(zero_grad="never"), "gradients from before this window"),
        "optimizer.step instead of scaler.step": (step(stepper="optimizer"), "you called `optimizer.step()` yourself"),
        "scheduler before the optimizer": (step(scheduler_on="before step"), "scheduler before the optimizer"),
        "scheduler never stepped": (step(scheduler_on="never"), "scheduler was not stepped"),
        "no unscale_": (step(unscale=False), "never called `scaler.unscale_"),
        "no clipping": (step(clip="never"), "above max_norm"),
        "scheduler frozen when the scale grows": (step(scheduler_on="scale unchanged"), "the scale *grew*"),
        "record: nothing returned": (step(record="none"), "returned None: return a dict"),
        "record: a tuple": (step(record="tuple"), "return a dict with the keys"),
        "record: a key missing": (step(record="no loss"), "has no 'loss'"),
        "record: grad_norm a tensor": (step(record="norm tensor"), "'grad_norm' is a tensor"),
        "record: grad_norm before unscale_": (step(record="norm before unscale_"), "before `scaler.unscale_`"),
        "record: grad_norm after clipping": (step(record="norm after clip"), "*after* clipping"),
        "record: finite grad_norm on a skipped step": (step(record="finite norm on a skip"), "yet 'grad_norm' is"),
        "record: the scaled loss": (step(record="scaled loss"), "you reported the scaled loss"),
        "record: the last micro-batch's loss": (step(record="last loss"), "only the last micro-batch"),
        "record: losses not divided": (step(record="losses not divided"), "without dividing each by the window"),
        "record: stepped always True": (step(record="stepped always"), "'stepped' is True, but GradScaler skipped"),
        "record: stepped False when the scale grew": (step(record="stepped only if scale unchanged"),
                                                      "'stepped' is False, but the optimizer step was applied"),
        "empty window: IndexError": (step(empty="index"), "micro_batches == []) raised IndexError"),
        "empty window: ValueError without the argument": (step(empty="unnamed"), "name the argument"),
        "empty window: returns normally": (step(empty="return"), "returned normally"),
        "stepped = isfinite(grad_norm), the scheduler with it (review rev25-r8 W1)": (
            step(stepped_from="finite norm, scheduler too"), "with a disabled scaler (`GradScaler(enabled=False)`) and "
                                                             "inf gradients"),
        "stepped = isfinite(grad_norm) in the record only (review rev25-r8 W1)": (
            step(stepped_from="finite norm, record only"), "a disabled scaler skips nothing"),
        "autocast for another device type (re-review)": (step(autocast_device="other"),
                                                         "autocast was off during the forward pass"),
    },
    ("09", "sample_weighted_window"): {
        "mean of the micro-batch means": (weighted(divide="count", reduction="mean"),
                                          "you averaged the micro-batch means"),
        "sum not divided": (weighted(divide="none"), "divide by the window's total number of rows"),
        "bfloat16": (weighted(autocast=torch.bfloat16), "float16 autocast"),
        "no autocast": (weighted(autocast=None), "float16 autocast"),
        "one backward for the window": (weighted(one_backward=True), "one scaled backward per micro-batch"),
        "rows of the first micro-batch": (weighted_last_batch_only_rows, "each row must weigh 1 / (total rows"),
        "optimizer.step() instead of scaler.step": (weighted_no_scaler_step, "you called `optimizer.step()` yourself"),
        "no zero_grad (stale .grad from an earlier step)": (weighted(zero_grad=False),
                                                            "zero the gradients at the start"),
    },
    ("09", "amp_verdict"): {
        "FP32's spread as noise (the learner's rejected answer)": (lesson_rule_with_fp32_spread,
                                                                   "FP32's own seed-to-seed spread as the noise"),
        "unpaired comparison": (verdict(paired=False), "as if the runs were independent"),
        "population std": (verdict(ddof=0), "population standard deviation"),
        "same sign on every seed (the reviewer's case)": (same_sign_rule, "every seed's difference has the same sign"),
        "sign reversed": (verdict(flip=True), "the sign is reversed"),
        "always 'within noise' behind a metaclass __mro__ property (review rev25-r6 E2)": (
            lambda fp32, amp: grader_fixtures.VerdictPosingAsStr("within noise"),
            "an object of type `VerdictPosingAsStr`, whose class defines `__eq__`, `__ne__`, `__class__`"),
        "strict <": (strict_rule, "compare with `≤`, not `<`"),
        "t statistic, identical runs divide 0 by 0": (t_statistic_unguarded, "0 / 0 is nan"),
        "any difference counts": (lambda f, a: "amp better" if sum(a) > sum(f) else "amp worse",
                                  "pair the runs by seed and judge the mean difference"),
        "a 95 % t-test (review 08-09)": (t_test_rule, "a t-test's critical value"),
        "2 standard deviations, not errors": (two_standard_deviations, "2 standard deviations of the differences"),
        "the course's own function": (capstone.paired_verdict, "this is ampcourse.capstone.paired_verdict"),
        "imports and calls the course's function (review 08-09)": (imports_the_course_rule,
                                                                   "this is ampcourse.capstone.paired_verdict"),
        "calls the course's function through the module": (calls_the_course_rule_from_the_notebook,
                                                           "this is ampcourse.capstone.paired_verdict"),
        "bad label": (lambda f, a: "same", "return 'within noise'"),
        "1.96 standard errors (re-review)": (standard_errors(1.96), "fewer than 2 standard errors (1.96"),
        "one-sided t critical value (re-review)": (standard_errors(lambda n: ONE_SIDED_T[n - 1]),
                                                   "a one-sided t-test's critical value"),
        "standard error std / sqrt(n - 1) (re-review)": (standard_errors(2, lambda n: math.sqrt(n - 1)),
                                                         "divided the standard deviation by √(n − 1)"),
        "2.5 standard errors (re-review)": (standard_errors(2.5), "judge the mean difference against its standard"),
        "1.9 standard errors (re-review)": (standard_errors(1.9), "fewer than 2 standard errors"),
    },
}
RIGHT = {
    ("09", "train_window"): {
        "the step with a record": step(),
        "zero_grad after the step": zero_grad_after_the_step,
        "validates its input; float32 logits; get_total_norm": strict_train_window,
        "a read-only Mapping of its own (review rev25-r7 E4: read into a dict)": _record_as_a_mapping,
        "'stepped' a numpy bool (review rev25-r9 N1: \"you gave a bool\")": step(record="numpy bool"),
    },
    ("09", "sample_weighted_window"): {
        "summed loss / total rows": weighted(),
        "mean × rows / total": weighted(divide="weighted mean", reduction="mean"),
        "share of the rows, model.zero_grad": weighted_by_row_mean,
    },
    ("09", "amp_verdict"): {
        "torch, paired, 2 SE": verdict(),
        "mean² against 4·var / n (review 08-09)": squares_no_sqrt,
        "numpy t statistic with a guard": t_statistic_with_guard,
        "a str subclass of its own (review rev25-r6 M1)": lambda fp32, amp: _HonestVerdict09(verdict()(fp32, amp)),
    },
}

test_wrong_answer_is_named, test_right_answer_passes = grader_fixtures.tests(WRONG, RIGHT)
