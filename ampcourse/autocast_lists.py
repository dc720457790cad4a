"""Autocast's op lists, read from the installed torch and compared across devices and with the docs.

Autocast keeps one op list per device.  An op on a list gets a *policy*:

* ``"lower_precision_fp"``: floating-point inputs are cast to autocast's dtype (bf16/fp16) and the
  op runs in it (matmuls, convolutions);
* ``"fp32"``: inputs are cast up to float32, or the op is asked for a float32 result (losses,
  on CUDA also softmax, ``sum``, the norms: :func:`fp32_rule`);
* ``"promote"``: if the inputs' dtypes differ, all are cast to the widest one (``cat`` on CPU,
  ``addcmul`` on CUDA).

Autocast also knows ``"banned"`` ops, which raise (``binary_cross_entropy`` on CUDA).  Every other
op falls through autocast's dispatch key untouched and runs in the dtype it is given; this module
calls that policy ``"fallthrough"``.

Where each list comes from
--------------------------
**Which ops** (:func:`registrations`, :func:`registered_ops`): the dispatcher of the installed torch,
``torch._C._dispatch_get_registrations_for_dispatch_key("AutocastCPU")`` (``"AutocastCUDA"``, ...),
which lists every op with a kernel under that autocast key.  ``aten/src/ATen/autocast_mode.cpp``
registers the kernels of all devices unconditionally, so a CPU-only build knows the CUDA, MPS and
XPU lists as well (torch 2.13.0+cpu: 127 ops for CPU, 119 for CUDA, 95 for MPS, 117 for XPU).

**Which policy**: not stored anywhere the Python side can read, so it is *probed* from the installed
torch.  For each registered op this module builds arguments from the op's schema, using stand-in
tensors that hold no data but carry the device type being probed (a ``__torch_dispatch__``
subclass), and calls the op with autocast switched on for that device.  Autocast's kernel runs
first; the subclass sees what it does: the casts (``aten._to_copy``) and the op it then calls, and
stops the call there.  Three calls decide the policy:

1. all floating inputs float32: a cast to the low dtype means ``"lower_precision_fp"``;
2. all inputs low: a cast to float32, or a float32 result asked for (``dtype=torch.float32``,
   ``half_to_float=True``), means ``"fp32"``;
3. first input float32, the others low: a cast of the low ones to float32 means ``"promote"``.

This needs no GPU: the stand-ins only have to *look like* CUDA tensors to the dispatcher.

**What the docs say** (:data:`DOCUMENTED_LISTS`, :func:`check_documented`): the lists in the
"Autocast Op Reference" of ``docs/source/amp.md`` in pytorch/pytorch, transcribed by hand.  They
name Python-level functions (``__matmul__``, ``GRUCell``, ``softmin``, ...) as well as aten ops, and
lag behind the code; :func:`check_documented` reports where they disagree with the probe.

**What really runs** (:func:`observe`, :func:`demo_three_behaviours`): real calls of an op under
autocast (``F.linear``, ``F.mse_loss``, ``torch.cat``, ...), recorded with
:func:`ampcourse.autocast_trace.trace`.  On the CPU they run for real.  On a device this machine does
not have they run on ``FakeTensorMode`` tensors of that device (shapes and dtypes only, no data),
marked ``simulated=True``: the same C++ autocast kernels and composite-op code run, and the meta
kernels give each op's output dtype.  Examples whose code needs the device itself (``grid_sample``
asks whether cuDNN can be used) cannot be simulated; :func:`observe` then says ``"unknown"``.
The simulation has not been checked against a real GPU here.

What the lists say in torch 2.13
--------------------------------
* Both devices run matmuls and convolutions low (``mm``, ``addmm``, ``bmm``, ``baddbmm``, ``linear``,
  ``matmul``, ``conv*``) and losses in float32 (``mse_loss``, ``nll_loss``, ``l1_loss``, ...).
* CUDA (and MPS, XPU) also cast up some normalisations, softmax, sums and products, norms and
  pointwise transcendental ops: ``layer_norm``, ``group_norm``, ``rms_norm``, ``softmax``,
  ``log_softmax``, ``sum``, ``prod``, ``cumsum``, ``exp``, ``log``, ``pow``, ``norm``...  Not every
  reduction: ``mean``, ``var``, ``std``, ``max`` and ``batch_norm`` are on no CUDA list
  (:func:`fp32_rule` names them, read from the installed torch).  **None of the FP32 ones but
  ``prod`` is on a CPU list**: under CPU autocast a bf16 ``layer_norm`` or ``softmax`` runs in bf16.
* CPU instead casts up linear algebra, FFTs, 3-D pooling and padding (``inverse``, ``linalg_*``,
  ``fft_*``, ``max_pool3d``, ``reflection_pad1d``, ...) and registers ``cross_entropy_loss`` itself
  (``prod`` and ``cdist`` are float32 on both).
* Promote lists: CPU ``cat``, ``stack``, ``index_copy``; CUDA ``addcmul``, ``addcdiv``, ``atan2``,
  ``bilinear``, ``cross``, ``dot``, ``vdot``, ``grid_sampler``, ``index_put``, ``scatter_add``,
  ``tensordot``.  So ``torch.dot(f32, bf16)`` raises under CPU autocast.
* Same op, different policy: ``binary_cross_entropy`` (CPU fp32, CUDA banned) and ``grid_sampler``
  (CPU fp32, CUDA promote).
* A composite op that is not registered still runs the policies of the ops it calls: on CPU
  ``einsum``, ``tensordot`` and ``linalg.multi_dot`` run low through ``bmm``/``mm``; on CUDA
  ``cross_entropy`` is not registered, its ``nll_loss`` runs in float32 but it passes
  ``log_softmax`` an explicit dtype, so the log-softmax itself runs in fp16/bf16.

Example::

    >>> registered_ops("cpu")["aten::mm"], registered_ops("cuda")["aten::layer_norm"]
    ('lower_precision_fp', 'fp32')
    >>> [(r.op, r.policies) for r in differences() if r.op == "aten::layer_norm"]
    [('aten::layer_norm', {'cpu': 'fallthrough', 'cuda': 'fp32'})]
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, fields, is_dataclass

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import _disable_current_modes
from torch.utils._pytree import tree_leaves

from ampcourse.autocast_trace import _dtype_name, trace
from ampcourse.tables import Table

__all__ = [
    "AUTOCAST_DISPATCH_KEYS",
    "DOCS_SOURCE",
    "DOCUMENTED_LISTS",
    "DOC_ALIASES",
    "EXAMPLES",
    "POLICIES",
    "DocCheck",
    "LOSS_NAMES",
    "RULE_NAMES",
    "RULE_OPS",
    "ListRow",
    "device_trace",
    "Observation",
    "OpRun",
    "Registration",
    "as_table",
    "autocast_device_types",
    "check_documented",
    "compare_lists",
    "demo_three_behaviours",
    "differences",
    "fp32_rule",
    "fp32_split",
    "loss_exceptions",
    "policy_of",
    "documented_ops",
    "observe",
    "probe",
    "registered_ops",
    "registrations",
]

POLICIES = ("lower_precision_fp", "fp32", "promote", "banned", "other", "fallthrough")
"""The policies this module reports.  ``"other"``: registered, but the probe saw no cast (none
happens in this torch); ``"fallthrough"``: not registered for the device, the op runs as given."""

AUTOCAST_DISPATCH_KEYS = {
    "cpu": "AutocastCPU",
    "cuda": "AutocastCUDA",
    "mps": "AutocastMPS",
    "xpu": "AutocastXPU",
    "mtia": "AutocastMTIA",
    "maia": "AutocastMAIA",
    "hpu": "AutocastHPU",
    "xla": "AutocastXLA",
    "privateuseone": "AutocastPrivateUse1",
}
"""Device type -> the autocast dispatch key its kernels are registered under (``DispatchKey.h``)."""

_PROBE_DTYPES = {"cpu": torch.bfloat16, "maia": torch.bfloat16, "hpu": torch.bfloat16, "xla": torch.bfloat16}
"""The low dtype used to probe a device (its autocast default; float16 for the others)."""


def _check_device_type(device_type: str) -> str:
    if not isinstance(device_type, str) or device_type not in AUTOCAST_DISPATCH_KEYS:
        raise ValueError(f"unknown device type {device_type!r}; known: {sorted(AUTOCAST_DISPATCH_KEYS)}")
    return device_type


def _base_name(op: str) -> str:
    """``"aten::conv2d.padding"`` -> ``"conv2d"``."""
    return op.removeprefix("aten::").partition(".")[0]


def _registered_names(device_type: str) -> tuple[str, ...]:
    key = AUTOCAST_DISPATCH_KEYS[_check_device_type(device_type)]
    return tuple(sorted(torch._C._dispatch_get_registrations_for_dispatch_key(key)))


def autocast_device_types() -> tuple[str, ...]:
    """The device types the installed torch has autocast kernels for (torch 2.13.0+cpu:
    ``('cpu', 'cuda', 'mps', 'xpu', 'mtia', 'maia')``, whatever hardware is present)."""
    return tuple(d for d in AUTOCAST_DISPATCH_KEYS if _registered_names(d))


# ---------------------------------------------------------------------------------------------
# Probing autocast's kernels with stand-in tensors
# ---------------------------------------------------------------------------------------------


class _Stop(Exception):
    """Raised by a stand-in tensor at the first op after autocast's casts, to end the call there."""


class _StandIn(torch.Tensor):
    """A tensor with a device type, a dtype and a shape but no data.

    Its ``__torch_dispatch__`` runs below autocast: it answers ``aten._to_copy`` (autocast's casts)
    with a new stand-in, records it, and records the first other op and stops the call.
    """

    events: list = []  # replaced per probe

    @staticmethod
    def __new__(cls, shape, dtype, device_type):
        return torch.Tensor._make_wrapper_subclass(cls, shape, dtype=dtype, device=torch.device(device_type))

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.ops.aten._to_copy.default and isinstance(args[0], _StandIn):
            source = args[0]
            dtype = kwargs.get("dtype") or source.dtype
            cls.events.append(("cast", source.dtype, dtype))
            return _StandIn(source.shape, dtype, source.device.type)
        cls.events.append(("op", func, args, kwargs))
        raise _Stop


def _argument_value(arg, make_tensor: Callable[[], torch.Tensor]):
    """A value for one schema argument; ``None`` with ``False`` if the default should be used."""
    type_name = str(arg.type)
    if type_name == "Tensor":
        return make_tensor(), True
    if type_name == "List[Tensor]":
        return [make_tensor(), make_tensor()], True
    if type_name == "List[Optional[Tensor]]":
        return [make_tensor()], True
    if type_name == "Optional[Tensor]":
        return (make_tensor(), True) if not arg.has_default_value() else (None, False)
    if arg.has_default_value():
        return None, False
    if type_name.startswith("Optional["):
        return None, True
    if type_name == "int":
        return 0, True
    if type_name in ("float", "number"):  # 1: a valid p/ord of every norm, a valid quantile
        return 1.0, True
    if type_name == "bool":
        return False, True
    if type_name == "str":
        return {"equation": "ij,jk->ik"}.get(arg.name, "fro"), True
    if type_name.startswith("List["):
        element = {"List[int]": 1, "List[float]": 1.0, "List[bool]": False}.get(type_name, 1)
        return [element] * (arg.N or 1), True
    raise TypeError(f"cannot make a value for argument {arg.name}: {type_name}")


def _call_with_stand_ins(op_name: str, device_type: str, dtypes: Iterator[torch.dtype]) -> list:
    """Call ``op_name`` with stand-in tensors (dtypes taken in order from ``dtypes``); return the events."""
    base, _, overload = op_name.removeprefix("aten::").partition(".")
    overload_fn = getattr(getattr(torch.ops.aten, base), overload or "default")

    def make_tensor():
        return _StandIn((2, 2), next(dtypes), device_type)

    args, kwargs, positional = [], {}, True
    for arg in overload_fn._schema.arguments:
        value, given = _argument_value(arg, make_tensor)
        if arg.kwarg_only:
            if given:
                kwargs[arg.name] = value
        elif given and positional:
            args.append(value)
        else:  # a positional argument left to its default ends the positional ones
            positional = False
    events: list = []
    _StandIn.events = events
    try:
        overload_fn(*args, **kwargs)
    except _Stop:
        pass
    except Exception as error:  # a composite op's own checks may fail on the stand-ins, after the casts
        events.append(("error", f"{type(error).__name__}: {error}"))
    return events


@contextlib.contextmanager
def _cpp_warnings_silenced():
    """Send the C++ side's stderr (file descriptor 2) to /dev/null meanwhile.

    Calling every registered op once makes the composite ones print their deprecation warnings
    (``torch.lu``, ``torch.qr``, ``stft`` without a window, ...).  Those go straight from c10 to
    stderr, not through Python's ``warnings``, and are about calls nobody made, so they are dropped.
    """
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):
        saved = None
    if saved is None:  # no usable fd 2: nothing to silence
        yield
        return
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


@contextlib.contextmanager
def _autocast_switched_on(device_type: str, dtype: torch.dtype):
    """Autocast on for ``device_type`` (thread-local state), restored on exit.  Unlike
    ``torch.autocast`` it does not check that the device exists, so it works for stand-in and fake
    tensors of any device type."""
    enabled, old_dtype = torch.is_autocast_enabled(device_type), torch.get_autocast_dtype(device_type)
    torch.set_autocast_enabled(device_type, True)
    torch.set_autocast_dtype(device_type, dtype)
    try:
        yield
    finally:
        torch.set_autocast_enabled(device_type, enabled)
        torch.set_autocast_dtype(device_type, old_dtype)


def _asks_for_fp32(func, args, kwargs) -> str:
    """If the op autocast called asks for a float32 result, say how (``"dtype=float32"``)."""
    values = dict(zip((a.name for a in func._schema.arguments), args, strict=False)) | kwargs
    for name, value in values.items():
        if value is torch.float32:
            return f"{name}=float32"
    if values.get("half_to_float") is True:
        return "half_to_float=True"
    return ""


@dataclass(frozen=True)
class Registration:
    """One op registered under a device's autocast key, with the policy the probe found.

    Attributes:
        op: the op as the dispatcher names it: ``"aten::conv2d.padding"``.
        device_type: ``"cpu"``, ``"cuda"``, ...
        policy: ``"lower_precision_fp"``, ``"fp32"``, ``"promote"``, ``"banned"`` or ``"other"``
            (``"fallthrough"`` from :func:`probe` for an op that is not registered).
        evidence: what autocast's kernel did that decided the policy, e.g. ``"f32->bf16 casts"``.
    """

    op: str
    device_type: str
    policy: str
    evidence: str


def probe(op_name: str, device_type: str, dtype: torch.dtype | None = None) -> Registration:
    """Find the autocast policy of one op (named with its overload, as registered: ``"aten::softmax.int"``)
    by calling autocast's kernel for ``device_type`` (see the module docstring); ``"fallthrough"`` if
    the op is not registered there.  ``dtype``: the low dtype to probe with (default: bf16 for CPU,
    fp16 for the others).  Works for every device type, with or without the device.

    Example::

        >>> probe("aten::sum", "cuda").evidence
        'calls aten.sum.default with dtype=float32'
        >>> probe("aten::mm", "cpu").evidence
        '2 f32->bf16 casts'
    """
    if op_name not in _registered_names(device_type):
        key = AUTOCAST_DISPATCH_KEYS[device_type]
        return Registration(op_name, device_type, "fallthrough", f"not registered under {key}")
    low = dtype or _PROBE_DTYPES.get(device_type, torch.float16)
    name = _dtype_name
    with (
        _cpp_warnings_silenced(),
        _disable_current_modes(),
        torch._C.DisableTorchFunction(),
        _autocast_switched_on(device_type, low),
    ):
        patterns = {
            "fp32": lambda: iter(lambda: torch.float32, None),
            "low": lambda: iter(lambda: low, None),
            "mixed": lambda: iter([torch.float32, *[low] * 64]),
        }
        events = {p: _call_with_stand_ins(op_name, device_type, make()) for p, make in patterns.items()}

    def casts(pattern, source, target):
        return [e for e in events[pattern] if e[0] == "cast" and e[1] == source and e[2] == target]

    errors = [e[1] for p in events for e in events[p] if e[0] == "error"]
    if banned := [error for error in errors if "unsafe to autocast" in error]:
        return Registration(op_name, device_type, "banned", "raises: " + banned[0].splitlines()[0])
    if found := casts("fp32", torch.float32, low):
        return Registration(op_name, device_type, "lower_precision_fp", f"{len(found)} f32->{name(low)} casts")
    if found := casts("low", low, torch.float32):
        return Registration(op_name, device_type, "fp32", f"{len(found)} {name(low)}->f32 casts")
    for event in events["low"]:
        if event[0] == "op" and (how := _asks_for_fp32(*event[1:])):
            return Registration(op_name, device_type, "fp32", f"calls {event[1]} with {how}")
    if found := casts("mixed", low, torch.float32):
        return Registration(op_name, device_type, "promote", f"mixed inputs: {len(found)} {name(low)}->f32 casts")
    detail = f"; error: {errors[0][:80]}" if errors else ""
    return Registration(op_name, device_type, "other", "no cast seen" + detail)


@functools.cache
def registrations(device_type: str) -> tuple[Registration, ...]:
    """Every op registered under ``device_type``'s autocast key, with its probed policy (cached).

    Example::

        >>> len(registrations("cpu")), registrations("cpu")[0]
        (127, Registration(op='aten::_addmm_activation', device_type='cpu', policy='lower_precision_fp', ...))
    """
    return tuple(probe(op, device_type) for op in _registered_names(device_type))


def registered_ops(device_type: str) -> dict[str, str]:
    """``{op: policy}`` for every op registered under ``device_type``'s autocast key.

    Example::

        >>> ops = registered_ops("cpu")
        >>> ops["aten::linear"], ops["aten::mse_loss"], ops["aten::cat"], "aten::layer_norm" in ops
        ('lower_precision_fp', 'fp32', 'promote', False)
    """
    return {r.op: r.policy for r in registrations(device_type)}


# ---------------------------------------------------------------------------------------------
# CPU vs CUDA
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ListRow:
    """One op in :func:`compare_lists`.

    Attributes:
        op: the op as the dispatcher names it.
        policies: device type -> policy there (``"fallthrough"`` where the op is not registered).
        differs: the policies are not all the same.
    """

    op: str
    policies: dict[str, str]
    differs: bool

    @property
    def only_on(self) -> tuple[str, ...]:
        """The devices the op is registered on, if it is not registered on all of them."""
        on = tuple(d for d, p in self.policies.items() if p != "fallthrough")
        return on if len(on) < len(self.policies) else ()


def compare_lists(device_types: Iterable[str] = ("cpu", "cuda")) -> list[ListRow]:
    """One row per op registered on any of ``device_types``: its policy on each, sorted by op name.

    Example::

        >>> rows = {r.op: r for r in compare_lists()}
        >>> rows["aten::mm"].policies, rows["aten::mm"].differs
        ({'cpu': 'lower_precision_fp', 'cuda': 'lower_precision_fp'}, False)
    """
    device_types = tuple(_check_device_type(d) for d in device_types)
    lists = {d: registered_ops(d) for d in device_types}
    ops = sorted(set().union(*lists.values()))
    rows = []
    for op in ops:
        policies = {d: lists[d].get(op, "fallthrough") for d in device_types}
        rows.append(ListRow(op, policies, len(set(policies.values())) > 1))
    return rows


def differences(device_types: Iterable[str] = ("cpu", "cuda")) -> list[ListRow]:
    """The rows of :func:`compare_lists` whose policies differ (including ops on one device only).

    Example::

        >>> {r.op: r.policies["cuda"] for r in differences() if r.op in ("aten::bmm", "aten::softmax.int")}
        {'aten::softmax.int': 'fp32'}
    """
    return [row for row in compare_lists(device_types) if row.differs]


# ---------------------------------------------------------------------------------------------
# The documented lists
# ---------------------------------------------------------------------------------------------

DOCS_SOURCE = (
    "pytorch/pytorch docs/source/amp.md, section 'Autocast Op Reference', at commit "
    "4e0ff98084d470b85e94fccdca7213f6580b1d5b (a main-branch version that already documents "
    "torch._functorch.config.backward_pass_autocast, which torch 2.13.0 has; the exact release of "
    "that commit is not known).  An older version (57ba412974d87ca62f0c7010e5953581587c40c6) also "
    "lists chain_matmul (CUDA, XPU float16) and cholesky (CPU float32)."
)
"""Where :data:`DOCUMENTED_LISTS` was transcribed from."""

def _names(text: str) -> tuple[str, ...]:
    """``"a, b,\n c"`` -> ``("a", "b", "c")``."""
    return tuple(name.strip() for name in text.split(",") if name.strip())


# Transcribed in the docs' order, one string per list (the CPU float32 list names `inverse` twice).
DOCUMENTED_LISTS: dict[str, dict[str, tuple[str, ...]]] = {
    "cuda": {
        "lower_precision_fp": _names("""
            __matmul__, addbmm, addmm, addmv, addr, baddbmm, bmm, multi_dot, conv1d, conv2d, conv3d,
            conv_transpose1d, conv_transpose2d, conv_transpose3d, GRUCell, linear, LSTMCell, matmul, mm, mv,
            prelu, RNNCell
        """),
        "fp32": _names("""
            __pow__, __rdiv__, __rpow__, __rtruediv__, acos, asin, binary_cross_entropy_with_logits, cosh,
            cosine_embedding_loss, cdist, cosine_similarity, cross_entropy, cumprod, cumsum, dist, erfinv, exp,
            expm1, group_norm, hinge_embedding_loss, kl_div, l1_loss, layer_norm, log, log_softmax, log10, log1p,
            log2, margin_ranking_loss, mse_loss, multilabel_margin_loss, multi_margin_loss, nll_loss, norm,
            normalize, pdist, poisson_nll_loss, pow, prod, reciprocal, rsqrt, sinh, smooth_l1_loss,
            soft_margin_loss, softmax, softmin, softplus, sum, renorm, tan, triplet_margin_loss
        """),
        "promote": _names("""
            addcdiv, addcmul, atan2, bilinear, cross, dot, grid_sample, index_put, scatter_add, tensordot
        """),
    },
    "xpu": {
        "lower_precision_fp": _names("""
            addbmm, addmm, addmv, addr, baddbmm, bmm, multi_dot, conv1d, conv2d, conv3d, conv_transpose1d,
            conv_transpose2d, conv_transpose3d, GRUCell, linear, LSTMCell, matmul, mm, mv, RNNCell
        """),
        "fp32": _names("""
            __pow__, __rdiv__, __rpow__, __rtruediv__, binary_cross_entropy_with_logits, cosine_embedding_loss,
            cosine_similarity, cumsum, dist, exp, group_norm, hinge_embedding_loss, kl_div, l1_loss, layer_norm,
            log, log_softmax, margin_ranking_loss, nll_loss, normalize, poisson_nll_loss, pow, reciprocal, rsqrt,
            soft_margin_loss, softmax, softmin, sum, triplet_margin_loss
        """),
        "promote": _names("""
            bilinear, cross, grid_sample, index_put, scatter_add, tensordot
        """),
    },
    "cpu": {
        "lower_precision_fp": _names("""
            conv1d, conv2d, conv3d, bmm, mm, linalg_vecdot, baddbmm, addmm, addbmm, linear, matmul, _convolution,
            conv_tbc, mkldnn_rnn_layer, conv_transpose1d, conv_transpose2d, conv_transpose3d, prelu,
            scaled_dot_product_attention, _native_multi_head_attention
        """),
        "fp32": _names("""
            avg_pool3d, binary_cross_entropy, grid_sampler, grid_sampler_2d, _grid_sampler_2d_cpu_fallback,
            grid_sampler_3d, polar, prod, quantile, nanquantile, stft, cdist, trace, view_as_complex,
            cholesky_inverse, cholesky_solve, inverse, lu_solve, orgqr, inverse, ormqr, pinverse, max_pool3d,
            max_unpool2d, max_unpool3d, adaptive_avg_pool3d, reflection_pad1d, reflection_pad2d,
            replication_pad1d, replication_pad2d, replication_pad3d, mse_loss, cosine_embedding_loss, nll_loss,
            nll_loss2d, hinge_embedding_loss, poisson_nll_loss, cross_entropy_loss, l1_loss, huber_loss,
            margin_ranking_loss, soft_margin_loss, triplet_margin_loss, multi_margin_loss, ctc_loss, kl_div,
            multilabel_margin_loss, binary_cross_entropy_with_logits, fft_fft, fft_ifft, fft_fft2, fft_ifft2,
            fft_fftn, fft_ifftn, fft_rfft, fft_irfft, fft_rfft2, fft_irfft2, fft_rfftn, fft_irfftn, fft_hfft,
            fft_ihfft, linalg_cond, linalg_matrix_rank, linalg_solve, linalg_cholesky, linalg_svdvals,
            linalg_eigvals, linalg_eigvalsh, linalg_inv, linalg_householder_product, linalg_tensorinv,
            linalg_tensorsolve, fake_quantize_per_tensor_affine, geqrf, _lu_with_info, qr, svd, triangular_solve,
            fractional_max_pool2d, fractional_max_pool3d, adaptive_max_pool3d, multilabel_margin_loss_forward,
            linalg_qr, linalg_cholesky_ex, linalg_svd, linalg_eig, linalg_eigh, linalg_lstsq, linalg_inv_ex
        """),
        "promote": _names("""
            cat, stack, index_copy
        """),
    },
}
"""device type -> policy -> the names the docs list, as written there (see :data:`DOCS_SOURCE`)."""

DOC_ALIASES: dict[str, tuple[str, ...]] = {
    "__matmul__": ("matmul",),
    "multi_dot": ("linalg_multi_dot",),
    "GRUCell": ("gru_cell", "_thnn_fused_gru_cell"),
    "LSTMCell": ("lstm_cell", "_thnn_fused_lstm_cell"),
    "RNNCell": ("rnn_tanh_cell", "rnn_relu_cell"),
    "__pow__": ("pow",),
    "__rpow__": ("pow",),
    "__rdiv__": ("reciprocal",),  # x.__rdiv__(y) is y * x.reciprocal()
    "__rtruediv__": ("reciprocal",),
    # CUDA registers no cross_entropy_loss; its nll_loss part is fp32.  (Its log_softmax part is not:
    # cross_entropy passes an explicit dtype, so it runs in fp16/bf16; see observe("aten::cross_entropy_loss", "cuda").)
    "cross_entropy": ("cross_entropy_loss", "nll_loss"),
    "norm": ("norm", "linalg_vector_norm", "linalg_matrix_norm", "frobenius_norm", "nuclear_norm"),
    "normalize": ("linalg_vector_norm", "norm"),  # F.normalize calls Tensor.norm
    "softmin": ("softmax",),  # F.softmin(x) is softmax(-x)
    "grid_sample": ("grid_sampler",),
}
"""A documented name that is not an aten op -> the aten ops (base names) that carry its policy."""


def documented_ops(device_type: str) -> dict[str, str]:
    """``{documented name: policy}`` for a device (``"cpu"``, ``"cuda"`` or ``"xpu"``), from :data:`DOCUMENTED_LISTS`.

    Example::

        >>> documented_ops("cuda")["layer_norm"], "layer_norm" in documented_ops("cpu")
        ('fp32', False)
    """
    if device_type not in DOCUMENTED_LISTS:
        raise ValueError(f"the docs have lists for {sorted(DOCUMENTED_LISTS)} only, not {device_type!r}")
    return {name: policy for policy, names in DOCUMENTED_LISTS[device_type].items() for name in names}


@dataclass(frozen=True)
class DocCheck:
    """A documented name (or an undocumented registered op) checked against the probed registrations.

    Attributes:
        name: the name as documented (or the registered op's base name, for ``"undocumented"`` rows).
        documented: the policy the docs give it (``""`` for undocumented rows).
        registered: ``{registered op: probed policy}`` for the aten ops the name stands for.
        status: ``"agrees"`` (registered, every probed policy is the documented one),
            ``"not registered"``, ``"differs"`` (registered with another policy), or
            ``"undocumented"`` (registered but not in the docs' lists).
    """

    name: str
    documented: str
    registered: dict[str, str]
    status: str


def check_documented(device_type: str) -> list[DocCheck]:
    """Compare the docs' lists for ``device_type`` with the probed registrations of the installed torch.

    One row per documented name (in the docs' order, duplicates once), then one per registered op
    (base name) that no documented name covers.  Nothing here is an error: the docs lag the code.

    Example::

        >>> {c.name: c.status for c in check_documented("cpu")}["cholesky"]
        'undocumented'
    """
    registered = registered_ops(device_type)
    by_base: dict[str, dict[str, str]] = {}
    for op, policy in registered.items():
        by_base.setdefault(_base_name(op), {})[op] = policy
    rows, covered = [], set()
    for name, policy in documented_ops(device_type).items():
        bases = DOC_ALIASES.get(name, (name,))
        found = {op: p for base in bases for op, p in by_base.get(base, {}).items()}
        covered.update(_base_name(op) for op in found)
        if not found:
            status = "not registered"
        elif all(p == policy for p in found.values()):
            status = "agrees"
        else:
            status = "differs"
        rows.append(DocCheck(name, policy, found, status))
    for base in sorted(set(by_base) - covered):
        rows.append(DocCheck(base, "", by_base[base], "undocumented"))
    return rows


# ---------------------------------------------------------------------------------------------
# Real calls, recorded with autocast_trace
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _T:
    """An input of an example call: a float tensor (its dtype set by the run) or, with ``high``,
    an int64 tensor of class indices in ``[0, high)``."""

    shape: tuple[int, ...]
    high: int | None = None


def _f(*shape: int) -> _T:
    return _T(shape)


def _i(high: int, *shape: int) -> _T:
    return _T(shape, high)


EXAMPLES: dict[str, tuple[tuple[_T, ...], Callable]] = {
    # lower_precision_fp on CPU and CUDA
    "aten::mm": ((_f(2, 4), _f(4, 3)), torch.mm),
    "aten::addmm": ((_f(3), _f(2, 4), _f(4, 3)), torch.addmm),
    "aten::bmm": ((_f(2, 2, 4), _f(2, 4, 3)), torch.bmm),
    "aten::baddbmm": ((_f(2, 2, 3), _f(2, 2, 4), _f(2, 4, 3)), torch.baddbmm),
    "aten::addbmm": ((_f(2, 3), _f(2, 2, 4), _f(2, 4, 3)), torch.addbmm),
    "aten::matmul": ((_f(2, 4), _f(4, 3)), torch.matmul),
    "aten::linear": ((_f(2, 4), _f(3, 4), _f(3)), F.linear),
    "aten::conv1d": ((_f(1, 2, 5), _f(3, 2, 3)), F.conv1d),
    "aten::conv2d": ((_f(1, 2, 5, 5), _f(3, 2, 3, 3)), F.conv2d),
    "aten::conv3d": ((_f(1, 2, 4, 4, 4), _f(3, 2, 3, 3, 3)), F.conv3d),
    "aten::conv_transpose1d": ((_f(1, 2, 5), _f(2, 3, 3)), F.conv_transpose1d),
    "aten::conv_transpose2d.input": ((_f(1, 2, 4, 4), _f(2, 3, 3, 3)), F.conv_transpose2d),
    "aten::prelu": ((_f(2, 3), _f(1)), F.prelu),
    "aten::linalg_vecdot": ((_f(2, 4), _f(2, 4)), torch.linalg.vecdot),
    "aten::scaled_dot_product_attention": ((_f(1, 2, 4), _f(1, 2, 4), _f(1, 2, 4)), F.scaled_dot_product_attention),
    # lower_precision_fp on CUDA only
    "aten::mv": ((_f(2, 4), _f(4)), torch.mv),
    "aten::addmv": ((_f(2), _f(2, 4), _f(4)), torch.addmv),
    "aten::addr": ((_f(2, 3), _f(2), _f(3)), torch.addr),
    "aten::einsum": ((_f(2, 4), _f(4, 3)), lambda a, b: torch.einsum("ij,jk->ik", a, b)),
    "aten::linalg_multi_dot": ((_f(2, 4), _f(4, 3), _f(3, 2)), lambda *ts: torch.linalg.multi_dot(ts)),
    # fp32 on CPU (and mostly on CUDA)
    "aten::mse_loss": ((_f(2, 3), _f(2, 3)), F.mse_loss),
    "aten::l1_loss": ((_f(2, 3), _f(2, 3)), F.l1_loss),
    "aten::smooth_l1_loss": ((_f(2, 3), _f(2, 3)), F.smooth_l1_loss),
    "aten::huber_loss": ((_f(2, 3), _f(2, 3)), F.huber_loss),
    "aten::nll_loss": ((_f(2, 3), _i(3, 2)), F.nll_loss),
    "aten::cross_entropy_loss": ((_f(2, 3), _i(3, 2)), F.cross_entropy),
    "aten::kl_div": ((_f(2, 3), _f(2, 3)), lambda a, b: F.kl_div(a, b, reduction="batchmean")),
    "aten::binary_cross_entropy_with_logits": ((_f(2, 3), _f(2, 3)), F.binary_cross_entropy_with_logits),
    "aten::soft_margin_loss": ((_f(2, 3), _f(2, 3)), F.soft_margin_loss),
    "aten::margin_ranking_loss": ((_f(4), _f(4), _f(4)), F.margin_ranking_loss),
    "aten::hinge_embedding_loss": ((_f(2, 3), _f(2, 3)), F.hinge_embedding_loss),
    "aten::cosine_embedding_loss": ((_f(2, 3), _f(2, 3), _f(2)), F.cosine_embedding_loss),
    "aten::poisson_nll_loss": ((_f(2, 3), _f(2, 3)), F.poisson_nll_loss),
    "aten::triplet_margin_loss": ((_f(2, 3), _f(2, 3), _f(2, 3)), F.triplet_margin_loss),
    "aten::multi_margin_loss": ((_f(2, 3), _i(3, 2)), F.multi_margin_loss),
    "aten::prod": ((_f(2, 3),), torch.prod),
    "aten::trace": ((_f(3, 3),), torch.trace),
    "aten::cdist": ((_f(2, 3), _f(4, 3)), torch.cdist),
    "aten::quantile": ((_f(5),), lambda a: torch.quantile(a, 0.5)),
    "aten::avg_pool3d": ((_f(1, 1, 2, 2, 2),), lambda a: F.avg_pool3d(a, 2)),
    "aten::max_pool3d": ((_f(1, 1, 2, 2, 2),), lambda a: F.max_pool3d(a, 2)),
    "aten::adaptive_avg_pool3d": ((_f(1, 1, 2, 2, 2),), lambda a: F.adaptive_avg_pool3d(a, 1)),
    "aten::reflection_pad1d": ((_f(1, 2, 4),), lambda a: F.pad(a, (1, 1), mode="reflect")),
    "aten::replication_pad2d": ((_f(1, 1, 3, 3),), lambda a: F.pad(a, (1, 1, 1, 1), mode="replicate")),
    "aten::inverse": ((_f(3, 3),), lambda a: torch.inverse(a + 3 * torch.eye(3, dtype=a.dtype, device=a.device))),
    "aten::grid_sampler": ((_f(1, 1, 3, 3), _f(1, 2, 2, 2)), lambda a, g: F.grid_sample(a, g, align_corners=False)),
    # fp32 on CUDA only: layer/group norm, softmax, reductions, pointwise
    "aten::layer_norm": ((_f(2, 4), _f(4), _f(4)), lambda a, w, b: F.layer_norm(a, (4,), w, b)),
    "aten::group_norm": ((_f(2, 4, 3),), lambda a: F.group_norm(a, 2)),
    "aten::softmax.int": ((_f(2, 4),), lambda a: torch.softmax(a, -1)),
    "aten::log_softmax.int": ((_f(2, 4),), lambda a: torch.log_softmax(a, -1)),
    "aten::sum": ((_f(2, 4),), torch.sum),
    "aten::cumsum": ((_f(2, 4),), lambda a: torch.cumsum(a, 1)),
    "aten::logsumexp": ((_f(2, 4),), lambda a: torch.logsumexp(a, 1)),
    "aten::exp": ((_f(2, 4),), torch.exp),
    "aten::log": ((_f(2, 4),), lambda a: torch.log(a.abs() + 1)),
    "aten::rsqrt": ((_f(2, 4),), lambda a: torch.rsqrt(a.abs() + 1)),
    "aten::pow.Tensor_Scalar": ((_f(2, 4),), lambda a: a**2),
    "aten::linalg_vector_norm": ((_f(2, 4),), torch.linalg.vector_norm),
    "aten::rms_norm": ((_f(2, 4),), lambda a: F.rms_norm(a, (4,))),
    "aten::upsample_nearest2d": ((_f(1, 1, 2, 2),), lambda a: F.interpolate(a, scale_factor=2.0)),
    # promote on CPU
    "aten::cat": ((_f(2, 3), _f(2, 3)), lambda a, b: torch.cat([a, b])),
    "aten::stack": ((_f(2, 3), _f(2, 3)), lambda a, b: torch.stack([a, b])),
    "aten::index_copy": ((_f(3, 2), _i(3, 2), _f(2, 2)), lambda a, i, s: a.index_copy(0, i, s)),
    # promote on CUDA
    "aten::addcmul": ((_f(2, 3), _f(2, 3), _f(2, 3)), torch.addcmul),
    "aten::addcdiv": ((_f(2, 3), _f(2, 3), _f(2, 3)), lambda a, b, c: torch.addcdiv(a, b, c.abs() + 1)),
    "aten::atan2": ((_f(2, 3), _f(2, 3)), torch.atan2),
    "aten::dot": ((_f(4), _f(4)), torch.dot),
    "aten::cross": ((_f(2, 3), _f(2, 3)), lambda a, b: torch.cross(a, b, dim=1)),
    "aten::tensordot": ((_f(2, 3), _f(3, 2)), lambda a, b: torch.tensordot(a, b, dims=1)),
    "aten::bilinear": ((_f(2, 3), _f(2, 4), _f(5, 3, 4)), F.bilinear),
    "aten::scatter_add": ((_f(2, 3), _i(2, 2, 3), _f(2, 3)), lambda a, i, s: a.scatter_add(0, i, s)),
    # on no list: add promotes by itself (type promotion), relu runs in what it gets
    "aten::add.Tensor": ((_f(2, 3), _f(2, 3)), torch.add),
    "aten::relu": ((_f(2, 3),), torch.relu),
}
"""aten op -> (inputs, a call that reaches it): small real calls that :func:`observe` runs."""

_PATTERNS = ("fp32", "low", "mixed")


@dataclass(frozen=True)
class OpRun:
    """One real call of an example under autocast.

    Attributes:
        op: the aten op the example reaches (a key of :data:`EXAMPLES`).
        policy: the op's registered policy on the device (from :func:`registered_ops`).
        inputs: ``"fp32"`` (all float inputs float32), ``"low"`` (all in the low dtype) or
            ``"mixed"`` (the first float32, the others low).
        input_dtypes: the dtypes of the float inputs, in order.
        output_dtype: the dtype of the call's first floating-point output.
        casts: the casts autocast inserted, as ``"f32->bf16 [2,4]"``.
        error: the error the call raised (then ``output_dtype`` is ``None``), e.g. for
            ``torch.dot`` of float32 and bf16 where autocast does not promote; else ``""``.
        simulated: the call ran on ``FakeTensorMode`` tensors (no such device on this machine).
    """

    op: str
    policy: str
    inputs: str
    input_dtypes: tuple[torch.dtype, ...]
    output_dtype: torch.dtype | None
    casts: tuple[str, ...]
    error: str
    simulated: bool


@functools.cache
def _device_present(device_type: str) -> bool:
    if device_type == "cpu":
        return True
    try:
        torch.empty(0, device=device_type)
    except (RuntimeError, AssertionError, ValueError):
        return False
    return True


@contextlib.contextmanager
def _fake_tensor_log_quiet():
    """FakeTensorMode logs a traceback for every op its meta kernel rejects (a bf16 ``inverse``);
    the error is reported in the row instead."""
    logger = logging.getLogger("torch._subclasses.fake_tensor")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


def _run(op: str, device_type: str, dtype: torch.dtype, pattern: str) -> OpRun:
    specs, call = EXAMPLES[op]
    simulated = not _device_present(device_type)
    n_float = sum(spec.high is None for spec in specs)
    if pattern == "mixed":
        float_dtypes = iter([torch.float32, *[dtype] * (n_float - 1)])
    else:
        float_dtypes = iter([torch.float32 if pattern == "fp32" else dtype] * n_float)
    generator = torch.Generator().manual_seed(0)

    def make(spec: _T) -> torch.Tensor:
        if simulated:  # fake tensors: shapes and dtypes only, made on the device directly
            if spec.high is not None:
                return torch.zeros(spec.shape, dtype=torch.int64, device=device_type)
            return torch.empty(spec.shape, dtype=next(float_dtypes), device=device_type)
        if spec.high is not None:
            return torch.randint(0, spec.high, spec.shape, generator=generator).to(device_type)
        return torch.randn(spec.shape, generator=generator).to(device_type, next(float_dtypes))

    def step():
        if simulated:
            autocast = _autocast_switched_on(device_type, dtype)
        else:
            autocast = torch.autocast(device_type, dtype=dtype)
        with autocast:
            try:
                return call(*inputs)
            except RuntimeError as error:  # e.g. torch.dot(f32, bf16) where autocast does not promote
                return error

    fake = torch._subclasses.fake_tensor.FakeTensorMode() if simulated else contextlib.nullcontext()
    with fake, _fake_tensor_log_quiet():
        inputs = [make(spec) for spec in specs]
        recorded = trace(step, phases="forward", exclude=r"^prim\.")
    error = f"{type(recorded.result).__name__}: {recorded.result}" if isinstance(recorded.result, Exception) else ""
    outputs = [t for t in tree_leaves(recorded.result) if isinstance(t, torch.Tensor) and t.is_floating_point()]
    casts = tuple(
        f"{_dtype_name(r.input_dtypes[0])}->{_dtype_name(r.output_dtype)} [{','.join(map(str, r.input_shapes[0]))}]"
        for r in recorded.rows
        if r.is_cast and r.cast_by == "autocast"
    )
    return OpRun(
        op=op,
        policy=registered_ops(device_type).get(op, "fallthrough"),
        inputs=pattern,
        input_dtypes=tuple(t.dtype for t in inputs if t.is_floating_point()),
        output_dtype=outputs[0].dtype if outputs else None,
        casts=casts,
        error=error.splitlines()[0] if error else "",
        simulated=simulated,
    )


@dataclass(frozen=True)
class Observation:
    """What the real calls of one example showed (see :func:`observe`).

    Attributes:
        op, device_type, dtype: what was run, where, with which autocast dtype.
        registered: the op's policy from :func:`registered_ops`.
        observed: the policy the runs show: ``"lower_precision_fp"`` (float32 inputs gave a low
            output), ``"fp32"`` (low inputs gave a float32 output), ``"promote"`` (autocast cast
            mixed inputs up but left all-low inputs alone), else ``"fallthrough"``; ``"unknown"``
            when a simulated device cannot run the example at all (its kernels need the device).
        runs: the three :class:`OpRun` (inputs ``"fp32"``, ``"low"``, ``"mixed"``).
    """

    op: str
    device_type: str
    dtype: torch.dtype
    registered: str
    observed: str
    runs: tuple[OpRun, ...]

    @property
    def agrees(self) -> bool:
        """The runs show the registered policy (``"other"`` and ``"banned"`` never agree)."""
        return self.registered == self.observed


def observe(op: str, device_type: str = "cpu", dtype: torch.dtype = torch.bfloat16) -> Observation:
    """Run the example for ``op`` (a key of :data:`EXAMPLES`) three times under autocast and say
    which policy the output dtypes and autocast's casts show.

    Example::

        >>> observe("aten::layer_norm", "cpu").observed, observe("aten::layer_norm", "cuda").observed
        ('fallthrough', 'fp32')
    """
    _check_device_type(device_type)
    if not isinstance(op, str) or op not in EXAMPLES:
        raise ValueError(f"op: no example call for {op!r}; there are examples for {sorted(EXAMPLES)}")
    if dtype not in (torch.bfloat16, torch.float16):
        raise ValueError(f"dtype must be torch.bfloat16 or torch.float16, an autocast dtype (got {dtype!r})")
    runs = tuple(_run(op, device_type, dtype, pattern) for pattern in _PATTERNS)
    fp32, low, mixed = runs
    if fp32.simulated and fp32.error:  # the simulation cannot run this example (a device-only kernel)
        observed = "unknown"
    elif fp32.output_dtype == dtype:
        observed = "lower_precision_fp"
    elif low.output_dtype == torch.float32:
        observed = "fp32"
    elif mixed.casts and not low.casts and mixed.output_dtype == torch.float32:
        observed = "promote"
    else:
        observed = "fallthrough"
    return Observation(op, device_type, dtype, runs[0].policy, observed, runs)


_DEMO_CANDIDATES = {
    "lower_precision_fp": ("aten::linear", "aten::mm", "aten::matmul"),
    "fp32": ("aten::mse_loss", "aten::layer_norm", "aten::cross_entropy_loss", "aten::nll_loss"),
    "promote": ("aten::cat", "aten::addcmul", "aten::stack", "aten::index_put"),
}
_DEMO_INPUTS = {"lower_precision_fp": "fp32", "fp32": "low", "promote": "mixed"}


def device_trace(
    fn: Callable[[str], object],
    device_type: str = "cuda",
    dtype: torch.dtype = torch.float16,
    **filters,
):
    """Trace ``fn(device_type)`` under autocast for ``device_type``, simulated if this machine lacks it.

    ``fn`` receives the device type and makes its tensors there (``torch.randn(2, 3, device=device)``);
    it runs inside autocast for ``device_type`` with ``dtype``. On a device this machine has, that is a
    real ``torch.autocast`` and real tensors. Otherwise the tensors are ``FakeTensorMode`` tensors of that
    device (shapes and dtypes, no data) and autocast is switched on for it directly, as :func:`observe`
    does: the same C++ autocast kernels run, so the trace shows which casts that device's autocast
    inserts and which dtype each op runs in. ``Trace.result`` is what ``fn`` returned (fake tensors when
    simulated). ``filters`` go to :func:`ampcourse.autocast_trace.trace` (``phases``, ``include``, ...);
    ``exclude`` defaults to ``prim.`` ops (the fake tensors' device queries).

    Example::

        >>> import torch.nn.functional as F
        >>> t = device_trace(lambda d: F.softmax(torch.randn(2, 3, device=d, dtype=torch.float16), -1),
        ...                  "cuda", torch.float16)
        >>> t.result.dtype   # softmax is on CUDA autocast's FP32 list
        torch.float32
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable, taking the device type (got {type(fn).__name__})")
    _check_device_type(device_type)
    if dtype not in (torch.float16, torch.bfloat16):
        raise ValueError(f"dtype must be torch.float16 or torch.bfloat16 (got {dtype!r})")
    simulated = not _device_present(device_type)
    filters.setdefault("exclude", r"^prim\.")  # the fake tensors' device queries

    def step():
        autocast = (_autocast_switched_on(device_type, dtype) if simulated
                    else torch.autocast(device_type, dtype=dtype))
        with autocast:
            return fn(device_type)

    fake = torch._subclasses.fake_tensor.FakeTensorMode() if simulated else contextlib.nullcontext()
    with fake, _fake_tensor_log_quiet():
        return trace(step, **filters)


def demo_three_behaviours(device_type: str = "cpu", dtype: torch.dtype = torch.bfloat16) -> list[OpRun]:
    """One op of each policy on ``device_type``, run under autocast and traced.

    The lower-precision op (``linear``) gets float32 inputs, the fp32 op (``mse_loss``) gets
    low-precision inputs, and the promote op (``cat`` on CPU, ``addcmul`` on CUDA, where ``cat`` is
    on no list) gets one float32 and one low input: each shows the casts its policy inserts.  A
    device this machine lacks is simulated with fake tensors.  Keep ``dtype=torch.float16`` for
    small tensors on CPU: CPU fp16 matmul is slow.

    Example::

        >>> [(r.op, r.input_dtypes, r.output_dtype, r.casts) for r in demo_three_behaviours()]
        [('aten::linear', (torch.float32, torch.float32, torch.float32), torch.bfloat16,
          ('f32->bf16 [3]', 'f32->bf16 [3,4]', 'f32->bf16 [2,4]')),
         ('aten::mse_loss', (torch.bfloat16, torch.bfloat16), torch.float32, ('bf16->f32 [2,3]', 'bf16->f32 [2,3]')),
         ('aten::cat', (torch.float32, torch.bfloat16), torch.float32, ('bf16->f32 [2,3]',))]
    """
    registered = registered_ops(_check_device_type(device_type))
    rows = []
    for policy, candidates in _DEMO_CANDIDATES.items():
        op = next((c for c in candidates if registered.get(c) == policy), None)
        if op is None:
            raise LookupError(f"none of {candidates} has policy {policy!r} on {device_type!r}")
        rows.append(_run(op, device_type, dtype, _DEMO_INPUTS[policy]))
    return rows


def as_table(rows: Iterable) -> Table:
    """Any rows of this module (dataclasses) as a :class:`~ampcourse.tables.Table`, dtypes written short:
    shown in a notebook as an HTML table that fits the page (no line wrapped mid-word), ``str()`` of it is
    the fixed-width text version."""
    if isinstance(rows, (str, bytes)) or not hasattr(rows, "__iter__"):
        raise TypeError(f"rows must be a list of this module's rows (dataclasses), got {type(rows).__name__}")
    rows = list(rows)
    if not all(is_dataclass(row) for row in rows):
        raise TypeError("rows must be this module's rows (dataclasses, e.g. from autocast_lists.lookup)")
    if not rows:
        return Table([], columns=[])
    names = [f.name for f in fields(rows[0])]

    def cell(value) -> str:
        if isinstance(value, torch.dtype):
            return _dtype_name(value)
        if isinstance(value, tuple):
            return " ".join(cell(v) for v in value)
        if isinstance(value, dict):
            return " ".join(f"{k}:{cell(v)}" for k, v in value.items())
        return str(value)

    return Table([{n: cell(getattr(row, n)) for n in names} for row in rows], columns=names)



# ---------------------------------------------------------------------------------------------
# Which ops run in FP32 on which device: the one source the lesson, the exercise, hints and check read
# ---------------------------------------------------------------------------------------------

RULE_OPS = {
    # the name lesson 03 and exercise 03 use → the aten op the probe asks about (its policy decides)
    "sum": "aten::sum",
    "prod": "aten::prod",
    "cumsum": "aten::cumsum",
    "logsumexp": "aten::logsumexp",
    "vector_norm": "aten::linalg_vector_norm",
    "layer_norm": "aten::layer_norm",
    "group_norm": "aten::group_norm",
    "rms_norm": "aten::rms_norm",
    "softmax": "aten::softmax.int",
    "log_softmax": "aten::log_softmax.int",
    "exp": "aten::exp",
    "log": "aten::log",
    "pow": "aten::pow.Tensor_Scalar",
    "mean": "aten::mean",
    "var": "aten::var",
    "std": "aten::std",
    "max": "aten::max",
    "amax": "aten::amax",
    "batch_norm": "aten::batch_norm",
    "linalg_inv": "aten::linalg_inv",
    "mse_loss": "aten::mse_loss",
    "l1_loss": "aten::l1_loss",
    "binary_cross_entropy": "aten::binary_cross_entropy",
    "ctc_loss": "aten::ctc_loss.IntList",
}
"""Ops lesson 03 names when it says which ops autocast runs in FP32 on which device."""

LOSS_NAMES = ("mse_loss", "l1_loss", "binary_cross_entropy", "ctc_loss")
RULE_NAMES = tuple(n for n in RULE_OPS if n not in LOSS_NAMES and n != "linalg_inv")
"""The reductions, norms, softmaxes and transcendental ops of lesson 03's FP32 rule (losses and linalg aside)."""


@functools.cache
def policy_of(name: str, device_type: str) -> str:
    """The probed policy of a :data:`RULE_OPS` name (``"sum"``) or an aten op (``"aten::sum"``) on a device."""
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, one of {sorted(RULE_OPS)} or an aten op name (got {name!r})")
    op = RULE_OPS.get(name, name)
    if not op.startswith("aten::"):
        raise ValueError(f"name must be one of {sorted(RULE_OPS)} or an aten op name like 'aten::sum' (got {name!r})")
    return probe(op, _check_device_type(device_type)).policy


def fp32_split(device_type: str, names: Iterable[str] = RULE_NAMES) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(names autocast runs in float32 on device_type, names it does not)``, probed from the installed torch.

    Example::

        >>> fp32_split("cuda", ("sum", "mean", "layer_norm", "batch_norm"))
        (('sum', 'layer_norm'), ('mean', 'batch_norm'))
    """
    names = tuple(names)
    on = tuple(n for n in names if policy_of(n, device_type) == "fp32")
    return on, tuple(n for n in names if n not in on)


def fp32_rule(device_type: str) -> str:
    """One sentence: which of :data:`RULE_OPS` (losses aside) autocast runs in FP32 on ``device_type``, and
    which reductions and norms it does not (they follow their input's dtype). Read by lesson 03, exercise 03's
    task text, its hint and its check."""
    on, off = fp32_split(device_type)
    low = [n for n in off if policy_of(n, device_type) == "fallthrough"]
    return (f"{device_type.upper()} autocast runs in float32: {', '.join(on) or 'none of them'}; "
            f"on no {device_type.upper()} list (so in their input's dtype): {', '.join(low) or 'none'}")


def loss_exceptions(device_types: Iterable[str] = ("cpu", "cuda", "mps")) -> dict[str, dict[str, str]]:
    """The losses of :data:`LOSS_NAMES` that are not in FP32 on every one of ``device_types``:
    ``{name: {device: policy}}`` (``binary_cross_entropy``: banned on CUDA, on no MPS list; ``ctc_loss``: CPU only).
    """
    device_types = tuple(_check_device_type(d) for d in device_types)
    out = {}
    for name in LOSS_NAMES:
        policies = {d: policy_of(name, d) for d in device_types}
        if set(policies.values()) != {"fp32"}:
            out[name] = policies
    return out
