"""Tests for ampcourse.autocast_trace: what autocast does on CPU, op by op, as the trace records it.

Everything is tiny (fp16 matmuls are slow on CPU) and runs with autocast on CPU, in bfloat16 and
float16.  The assertions are the facts the lesson states, checked against the installed torch.
"""

import doctest
import re

import pytest
import torch
import torch.nn.functional as F

from ampcourse import autocast_trace
from ampcourse.autocast_trace import LOW_PRECISION_DTYPES, OpRecord, Trace, trace

LOW_DTYPES = [pytest.param(torch.bfloat16, id="bf16"), pytest.param(torch.float16, id="fp16")]


def small_model():
    """Linear -> ReLU -> Linear, with a batch of 2 and 3 classes."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    return model, torch.randn(2, 4), torch.tensor([0, 2])


def training_step(model, x, y, dtype):
    """Forward and loss under autocast, backward outside it (the recommended pattern)."""

    def step():
        with torch.autocast("cpu", dtype=dtype):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        return loss

    return step


def casts(rows):
    return [row for row in rows if row.is_cast]


def ops(rows, name):
    return [row for row in rows if row.op == name]


def preceding_rows(t: Trace, row: OpRecord, n: int):
    """The n rows shown just before `row` in the trace's filtered rows."""
    position = t.rows.index(row)
    return list(t.rows[max(position - n, 0) : position])


@pytest.mark.parametrize("dtype", LOW_DTYPES)
def test_linear_runs_addmm_in_low_precision_after_autocast_casts(dtype):
    linear, x = torch.nn.Linear(4, 3), torch.randn(2, 4)

    def forward():
        with torch.autocast("cpu", dtype=dtype):
            return linear(x)

    t = trace(forward)
    assert t.result.dtype == dtype
    (addmm,) = ops(t.rows, "aten.addmm.default")
    assert addmm.input_dtypes == (dtype, dtype, dtype)  # bias, input, weight.t()
    assert addmm.output_dtypes == (dtype,)
    assert addmm.output_shapes == ((2, 3),)
    # The three casts autocast inserted just before it (the transpose of the weight is a view, hidden).
    before = preceding_rows(t, addmm, 3)
    assert [row.op for row in before] == ["aten._to_copy.default"] * 3
    assert all(row.is_cast and row.cast_by == "autocast" for row in before)
    assert [(row.input_dtypes, row.output_dtypes) for row in before] == [((torch.float32,), (dtype,))] * 3
    assert sorted(row.input_shapes[0] for row in before) == sorted([(3,), (3, 4), (2, 4)])  # bias, weight, x
    assert all(row.bytes_cast == torch.Size(row.output_shapes[0]).numel() * 2 for row in before)  # 2-byte dtypes
    assert t.summary().casts_to_low == 3
    # The parameters themselves are untouched: autocast casts copies.
    assert linear.weight.dtype == linear.bias.dtype == torch.float32


@pytest.mark.parametrize("dtype", LOW_DTYPES)
def test_cross_entropy_runs_in_fp32_after_a_cast_to_fp32(dtype):
    model, x, y = small_model()
    t = trace(training_step(model, x, y, dtype), phases="forward")
    (log_softmax,) = ops(t.rows, "aten._log_softmax.default")
    (nll,) = ops(t.rows, "aten.nll_loss_forward.default")
    (cast,) = preceding_rows(t, log_softmax, 1)
    # cross_entropy_loss is on the CPU autocast fp32 list: the bf16/fp16 logits are cast up first...
    assert cast.is_cast and cast.cast_by == "autocast"
    assert (cast.input_dtypes, cast.output_dtypes, cast.output_shapes) == ((dtype,), (torch.float32,), ((2, 3),))
    # ...then both ops it decomposes into run in FP32.
    assert log_softmax.input_dtypes == log_softmax.output_dtypes == (torch.float32,)
    assert nll.input_dtypes == (torch.float32, torch.int64)
    assert set(nll.output_dtypes) == {torch.float32}
    assert t.result.dtype == torch.float32
    # Only the last Linear's output is cast up; everything before the loss stays low precision.
    assert [row.output_dtypes for row in casts(t.rows)].count((torch.float32,)) == 1


@pytest.mark.parametrize(
    ("loss_fn", "fp32_op"),
    [(F.mse_loss, "aten.mse_loss.default"), (F.nll_loss, "aten.nll_loss_forward.default")],
    ids=["mse_loss", "nll_loss"],
)
def test_other_fp32_list_losses_cast_their_low_precision_inputs_up(loss_fn, fp32_op):
    a = torch.randn(2, 3, dtype=torch.bfloat16)
    b = torch.randn(2, 3, dtype=torch.bfloat16) if loss_fn is F.mse_loss else torch.tensor([0, 2])

    def forward():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return loss_fn(a, b)

    t = trace(forward)
    (row,) = ops(t.rows, fp32_op)
    assert set(row.output_dtypes) == {torch.float32}
    assert all(c.cast_by == "autocast" and c.output_dtypes == (torch.float32,) for c in casts(t.rows))
    assert len(casts(t.rows)) == (2 if loss_fn is F.mse_loss else 1)


def test_log_softmax_alone_is_not_on_the_cpu_fp32_list():
    """Unlike cross_entropy, log_softmax/softmax called alone are not on CPU autocast's lists:
    they run in whatever dtype they are given."""
    a = torch.randn(2, 3, dtype=torch.bfloat16)

    def forward():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return torch.log_softmax(a, dim=1), torch.softmax(a, dim=1)

    t = trace(forward)
    assert not casts(t.rows)
    assert {row.op for row in t.rows} == {"aten._log_softmax.default", "aten._softmax.default"}
    assert all(row.output_dtypes == (torch.bfloat16,) for row in t.rows)
    assert not torch._C._dispatch_has_kernel_for_dispatch_key("aten::log_softmax.int", "AutocastCPU")
    assert torch._C._dispatch_has_kernel_for_dispatch_key("aten::cross_entropy_loss", "AutocastCPU")


@pytest.mark.parametrize("dtype", LOW_DTYPES)
def test_backward_runs_in_the_forward_dtypes_and_grads_come_back_fp32(dtype):
    model, x, y = small_model()
    step = training_step(model, x, y, dtype)
    t = trace(step, phases="backward", keep_views=True)
    params = dict(model.named_parameters())

    # Parameters stay FP32, and so do their gradients.
    assert all(p.dtype == torch.float32 and p.grad.dtype == torch.float32 for p in params.values())

    # The weight/input-grad matmuls of both Linears run in low precision.
    mms = ops(t.rows, "aten.mm.default")
    assert len(mms) == 3  # 2 for the last Linear, 1 (weight grad only: x needs no grad) for the first
    assert all(row.node == "AddmmBackward0" for row in mms)
    assert all(row.input_dtypes == (dtype, dtype) and row.output_dtypes == (dtype,) for row in mms)
    (relu_grad,) = ops(t.rows, "aten.threshold_backward.default")
    assert relu_grad.output_dtypes == (dtype,)

    # The loss part runs in FP32, and the FP32 gradient of the logits is cast down once...
    (log_softmax_grad,) = ops(t.rows, "aten._log_softmax_backward_data.default")
    assert log_softmax_grad.output_dtypes == (torch.float32,)
    backward_casts = casts(t.rows)
    assert all(row.cast_by == "backward" and row.node == "ToCopyBackward0" for row in backward_casts)
    down = [row for row in backward_casts if row.output_dtypes == (dtype,)]
    assert [(row.input_dtypes, row.output_shapes) for row in down] == [((torch.float32,), ((2, 3),))]
    # ...and each parameter's low-precision gradient is cast back to FP32: the backward of the
    # forward cast of that parameter.
    up = [row for row in backward_casts if row.output_dtypes == (torch.float32,)]
    assert all(row.input_dtypes == (dtype,) for row in up)
    assert sorted(row.output_shapes[0] for row in up) == sorted(tuple(p.shape) for p in params.values())
    # AccumulateGrad stores each FP32 gradient as .grad (the first time, just a detach, no copy).
    accumulate = [row for row in t.rows if row.node == "AccumulateGrad"]
    assert [row.op for row in accumulate] == ["aten.detach.default"] * len(params)
    assert all(row.output_dtypes == (torch.float32,) for row in accumulate)

    # A second backward accumulates into the existing .grad: an FP32 add_.
    t2 = trace(step, phases="backward")
    accumulate = [row for row in t2.rows if row.node == "AccumulateGrad"]
    assert [row.op for row in accumulate] == ["aten.add_.Tensor"] * len(params)
    assert all(row.input_dtypes == (torch.float32, torch.float32) for row in accumulate)


def test_backward_inside_autocast_looks_the_same():
    """Backward ops do not go through autocast's lists (they run in their forward op's dtypes),
    so calling backward() inside the autocast region changes nothing."""
    outside = trace(training_step(*small_model(), torch.bfloat16))
    model, x, y = small_model()

    def inside():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            F.cross_entropy(model(x), y).backward()

    inside_trace = trace(inside)

    def signature(t):
        return [(r.op, r.phase, r.node, r.input_dtypes, r.output_dtypes, r.cast_by) for r in t.all_rows]

    assert signature(inside_trace) == signature(outside)


def test_without_autocast_there_are_no_casts_and_everything_is_fp32():
    model, x, y = small_model()
    t = trace(lambda: F.cross_entropy(model(x), y).backward())
    assert not casts(t.all_rows)
    assert all(d in (torch.float32, torch.int64) for row in t.all_rows for d in row.input_dtypes + row.output_dtypes)
    summary = t.summary()
    assert summary.casts == summary.low_precision_ops == summary.bytes_cast == summary.autocast_casts == 0
    assert summary.fp32_ops == summary.ops == len(t.rows) > 0


@pytest.mark.parametrize("dtype", LOW_DTYPES)
def test_summary_counts_match_the_rows(dtype):
    t = trace(training_step(*small_model(), dtype))
    s = t.summary()
    rows = t.rows
    assert s.ops == len(rows) == s.low_precision_ops + s.fp32_ops + s.other_ops + s.casts
    assert s.low_precision_ops == sum(
        not r.is_cast and any(d in LOW_PRECISION_DTYPES for d in r.output_dtypes) for r in rows
    )
    assert s.casts == len(casts(rows)) == s.casts_to_low + s.casts_to_fp32  # only FP32 <-> low casts here
    assert s.bytes_cast == sum(
        torch.Size(r.output_shapes[0]).numel() * r.output_dtypes[0].itemsize for r in casts(rows)
    )
    # The small model: forward casts x, 2 weights, 2 biases down and the logits up (autocast);
    # backward casts the logits' gradient down and the 4 parameters' gradients up.
    assert (s.casts_to_low, s.casts_to_fp32, s.autocast_casts) == (6, 5, 6)
    # Filtering changes the counts accordingly.
    forward, backward = t.filter(phases="forward").summary(), t.filter(phases="backward").summary()
    assert forward.ops + backward.ops == s.ops
    assert forward.bytes_cast + backward.bytes_cast == s.bytes_cast


def test_phase_and_autograd_node_of_each_op():
    t = trace(training_step(*small_model(), torch.bfloat16), keep_views=True)
    phases = [row.phase for row in t.all_rows]
    # All forward ops come first, then all backward ops.
    assert phases == sorted(phases, key=("forward", "backward").index)
    assert all(row.node == "" for row in t.all_rows if row.phase == "forward")
    # The seed gradient is made by backward() before the engine starts: backward, but no node.
    seed = t.filter(phases="backward").rows[0]
    assert (seed.op, seed.node, seed.output_shapes) == ("aten.ones_like.default", "", ((),))
    assert all(row.node for row in t.filter(phases="backward").rows[1:])
    # torch.autograd.grad counts as backward too.
    w = torch.randn(3, requires_grad=True)
    g = trace(lambda: torch.autograd.grad((w * w).sum(), w))
    assert [row.phase for row in g.rows if row.op == "aten.mul.Tensor"] == ["forward", "backward", "backward"]


def test_who_asked_for_each_cast():
    linear, x = torch.nn.Linear(4, 3), torch.randn(2, 4)

    def forward():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = linear(x).float()  # the common "compute the loss in FP32" idiom
            wide = torch.softmax(logits, dim=1, dtype=torch.float64)  # an op casting inside itself
        return logits.half(), torch.softmax(logits, dim=1, dtype=torch.bfloat16), wide

    t = trace(forward)
    assert [row.cast_by for row in casts(t.rows)] == ["autocast"] * 3 + ["explicit", "implicit", "explicit", "implicit"]
    assert t.summary().autocast_casts == 3


def test_filters():
    t = trace(training_step(*small_model(), torch.bfloat16))
    assert len(t.all_rows) > len(t.rows)
    assert not any(row.is_view for row in t.rows)
    assert {"aten.t.default", "aten.detach.default"} <= {row.op for row in t.filter(keep_views=True).rows}
    assert {row.phase for row in t.filter(phases="forward").rows} == {"forward"}
    assert {row.phase for row in t.filter(phases=["backward"]).rows} == {"backward"}
    only = t.filter(include=r"\.(addmm|mm)\.")
    assert {row.op for row in only} == {"aten.addmm.default", "aten.mm.default"}
    assert "aten._to_copy.default" not in {row.op for row in t.filter(exclude="_to_copy").rows}
    # filter() keeps the options it is not given, and never loses the recorded ops.
    narrowed = only.filter(phases="backward")
    assert {row.op for row in narrowed} == {"aten.mm.default"} and narrowed.all_rows == t.all_rows
    # Indices are positions among all recorded ops, so a filtered table shows gaps.
    assert [row.index for row in t.all_rows] == list(range(len(t.all_rows)))
    # The same options work on trace() itself.
    direct = trace(training_step(*small_model(), torch.bfloat16), phases="backward", include=re.compile("mm"))
    assert [row.op for row in direct] == [row.op for row in t.filter(phases="backward", include="mm")]


def test_validation_errors():
    with pytest.raises(TypeError, match=r"fn must be callable.*got a Linear|fn must be callable.*got a Tensor"):
        trace(torch.randn(2))
    with pytest.raises(TypeError, match="fn must be callable"):
        trace("model")
    step = training_step(*small_model(), torch.bfloat16)
    with pytest.raises(ValueError, match="phases must be a non-empty selection"):
        trace(step, phases="backwards")
    with pytest.raises(ValueError, match="phases"):
        trace(step, phases=())
    with pytest.raises(ValueError, match="include is not a valid regular expression"):
        trace(step, include="mm(")
    with pytest.raises(TypeError, match="exclude must be None, a regex string or a compiled pattern"):
        trace(step, exclude=3)
    with pytest.raises(TypeError, match="keep_views must be True or False"):
        trace(step, keep_views="yes")
    t = trace(step)
    with pytest.raises(TypeError, match="unknown filter option"):
        t.filter(phase="forward")
    with pytest.raises(ValueError, match="max_rows"):
        t.table(max_rows=-1)
    # Arguments are passed to fn, and the traced function's exceptions propagate.
    linear = torch.nn.Linear(4, 3)
    assert trace(linear, torch.randn(2, 4)).result.shape == (2, 3)
    with pytest.raises(RuntimeError):
        trace(linear, torch.randn(2, 5))


def test_table_and_html():
    t = trace(training_step(*small_model(), torch.bfloat16))
    lines = t.table().splitlines()
    assert lines[0].split()[:5] == ["#", "phase", "op", "inputs", "outputs"]
    assert set(lines[1]) <= {"-", " "}
    assert len(lines) == 2 + len(t.rows)
    assert any("aten.addmm.default" in line and "bf16[2,8]" in line for line in lines)
    assert any("autocast" in line and "f32[8,4]" in line for line in lines)
    short = t.table(max_rows=3).splitlines()
    assert len(short) == 2 + 3 + 1 and short[-1] == f"... {len(t.rows) - 3} more rows"
    page = t._repr_html_()
    assert page.count("<tr") == 1 + len(t.rows) and "<table>" in page and "ToCopyBackward0" in page
    assert str(t.summary()) in str(t)
    assert repr(t) == f"<Trace: {len(t.rows)} of {len(t.all_rows)} recorded ops shown>"


def test_docstring_example():
    assert doctest.testmod(autocast_trace, extraglobs={"torch": torch}).failed == 0


def test_small_model_figures(figures):
    t = trace(training_step(*small_model(), torch.bfloat16))
    figures("autocast_trace: Linear-ReLU-Linear + cross_entropy + backward, CPU autocast bf16")
    for line in str(t.summary()).splitlines():
        figures(f"  {line}")
