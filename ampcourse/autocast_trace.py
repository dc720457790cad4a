"""Autocast seen op by op: which aten ops run, in which dtype, and which casts autocast inserts.

:func:`trace` runs any callable (a forward pass, or a whole ``loss.backward()`` step) and records
every aten op that reaches the dispatcher *below* autocast, with its input and output dtypes and
shapes, whether it is a dtype cast (and who asked for it), and whether it ran in the forward or
the backward pass::

    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    x, y = torch.randn(2, 4), torch.tensor([0, 2])

    def step():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()

    t = trace(step)
    print(t.table())      # or just `t` as the last line of a notebook cell: an HTML table
    print(t.summary())

Why a ``TorchDispatchMode`` sees autocast's casts
--------------------------------------------------
Every call to an aten op goes through PyTorch's dispatcher, which runs one kernel per *dispatch
key* set on the call, highest-priority key first; each kernel does its bit and redispatches to the
next key.  The keys are declared in ``torch/include/c10/core/DispatchKey.h`` (installed with
torch), lowest priority first; the ones that matter here appear in this order::

    Python, ..., ADInplaceOrView, AutogradOther, AutogradFunctionality, ..., AutocastCPU, ...,
    AutocastCUDA, ..., PythonTLSSnapshot, ...

so for a CPU op under ``torch.autocast("cpu")`` the order of work is

1. **AutocastCPU**: if the op is on one of autocast's lists, its wrapper (``WrapFunction_`` in
   ``torch/include/ATen/autocast_mode.h``) casts the floating-point tensor arguments with
   ``cached_cast`` (to bf16/fp16 for ``lower_precision_fp`` ops such as ``addmm``, to float32 for
   ``fp32`` ops such as ``nll_loss``), then calls the op again with the AutocastCPU key excluded
   (``ExcludeDispatchKeyGuard no_autocast``).  Each cast is itself a dispatched op: ``Tensor.to(dtype)``
   (``aten::to.dtype``, a CompositeImplicitAutograd op) decomposes to **``aten._to_copy``**.
2. **Autograd**: records the cast and the op in the autograd graph.  ``DispatchKey.h`` puts Autocast
   above autograd on purpose: "Autocasting precedes VariableTypeId, to ensure casts are
   autograd-exposed and inputs are saved for backward in the post-autocast type."  So each cast
   gets a ``ToCopyBackward0`` node, whose backward casts the gradient back to the original dtype.
3. **Python**: the key of ``torch.utils._python_dispatch.TorchDispatchMode``.  It sits below both,
   so the mode sees the ops autocast produced: the ``_to_copy`` casts first, then the op itself on
   the cast tensors.  (The autocast-level op, e.g. ``cross_entropy_loss``, is never seen: it is a
   composite op, decomposed into ``_log_softmax`` and ``nll_loss_forward`` before the Python key.)

What a trace shows on CPU (torch 2.13)
--------------------------------------
* Autocast's casts all arrive as ``aten._to_copy.default``; no ``aten.to`` ever reaches the mode.
* ``addmm``/``mm`` (``Linear``) get their input, weight and bias cast to the low dtype and run in it;
  ``relu`` has no autocast rule and simply runs in the dtype it is given (bf16 after a Linear).
* ``cross_entropy`` is on the CPU fp32 list: a low→FP32 cast of the logits, then ``_log_softmax``
  and ``nll_loss_forward`` in FP32.  (``softmax``/``log_softmax`` alone are *not* on the CPU lists:
  they run in bf16 if given bf16.  ``torch._C._dispatch_get_registrations_for_dispatch_key(
  "AutocastCPU")`` lists every op autocast intercepts on CPU.)
* Backward ops do not go through autocast's lists; each runs in the dtype its forward op used: the
  ``mm``s of ``AddmmBackward0`` run in bf16, and the ``ToCopyBackward0`` of every forward cast casts
  the gradient back (bf16 weight grad → FP32), so ``AccumulateGrad`` stores FP32 ``.grad``.
* Autocast caches the casts of leaf tensors that require grad (the parameters) until the outermost
  ``autocast`` exits, so a weight used twice in one autocast region is cast once.

How a row's phase is decided
----------------------------
An op is ``"backward"`` if it runs while the autograd engine executes a graph task on this thread
(``torch._C._current_graph_task_id() != -1``, the test ``torch.utils.module_tracker`` uses for
``is_bw``), or inside a call to ``Tensor.backward``, ``torch.autograd.backward`` or
``torch.autograd.grad`` (which catches the seed gradient, the ``ones_like`` that ``backward()``
makes before the engine starts).  Everything else, including an optimizer step, is ``"forward"``.
In backward rows, ``node`` names the autograd node that ran the op (``torch._C._current_autograd_node()``),
e.g. ``AddmmBackward0``.

Who asked for a cast
--------------------
At the dispatcher level an autocast cast and ``x.float()`` are the same ``_to_copy``.  To tell them
apart, :func:`trace` also installs a ``torch.overrides.TorchFunctionMode``, which sees the Python-level
calls (``F.linear``, ``Tensor.float``, ...) before the dispatcher does, and notes for each one whether
it is a dtype conversion method and whether autocast is on.  A forward cast is then labelled
``"explicit"`` (made by ``.to``/``.float``/``.half``/``.bfloat16``/``.double``/``.type``/``.type_as``),
``"autocast"`` (made inside any other call while autocast was enabled for the tensor's device, to
autocast's dtype or to float32) or ``"implicit"`` (any other cast made inside an op's own code, e.g.
``softmax(x, dtype=torch.float64)``).  A cast to autocast's dtype or float32 inside an op's own code
*under* autocast, e.g. ``softmax(x, dtype=torch.float32)``, is labelled ``"autocast"`` too: at this
level it cannot be told from autocast's.  Casts in the backward pass are labelled ``"backward"``:
they are the ``ToCopyBackward0`` gradients of forward casts.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

__all__ = ["LOW_PRECISION_DTYPES", "PHASES", "OpRecord", "Trace", "TraceSummary", "trace"]

PHASES = ("forward", "backward")
"""The two phases a recorded op can belong to."""

LOW_PRECISION_DTYPES = (torch.bfloat16, torch.float16)
"""The dtypes counted as low precision (the dtypes autocast casts to)."""

# Methods whose casts are "explicit" (asked for by the program).  Both the C-level methods of
# TensorBase and any Python override on torch.Tensor, compared by identity.
_CONVERSION_METHODS = frozenset(
    getattr(cls, name)
    for cls in (torch._C.TensorBase, torch.Tensor)
    for name in ("to", "float", "half", "bfloat16", "double", "type", "type_as")
)
_BACKWARD_ENTRY_POINTS = frozenset({torch.Tensor.backward, torch.autograd.backward, torch.autograd.grad})


def _autocast_device_types() -> tuple[str, ...]:
    """The device types this torch can report an autocast state for (read at every Python-level call)."""
    supported = []
    for device_type in ("cpu", "cuda", "xpu", "mps", "hpu", "mtia", "maia", "xla", "ipu"):
        try:
            torch.is_autocast_enabled(device_type)
        except (RuntimeError, TypeError, ValueError):
            continue
        supported.append(device_type)
    return tuple(supported)


_AUTOCAST_DEVICE_TYPES = _autocast_device_types()
# Ops that only allocate memory (autograd and factories use them); hidden unless keep_allocs=True.
_ALLOCATION_OPS = re.compile(r"^aten\.(empty|empty_like|empty_strided|new_empty|new_empty_strided)\.")

_DTYPE_ABBREVIATIONS = {
    torch.float64: "f64",
    torch.float32: "f32",
    torch.bfloat16: "bf16",
    torch.float16: "f16",
    torch.int64: "i64",
    torch.int32: "i32",
    torch.int16: "i16",
    torch.int8: "i8",
    torch.uint8: "u8",
    torch.bool: "bool",
}


def _dtype_name(dtype: torch.dtype) -> str:
    """Short dtype name for tables: ``torch.bfloat16`` -> ``bf16``."""
    return _DTYPE_ABBREVIATIONS.get(dtype, str(dtype).removeprefix("torch."))


def _format_bytes(n: int) -> str:
    """``96`` -> ``96 B``, ``2048`` -> ``2.0 KiB``."""
    if n < 1024:
        return f"{n} B"
    for unit in ("KiB", "MiB", "GiB"):
        n /= 1024
        if n < 1024 or unit == "GiB":
            return f"{n:.1f} {unit}"
    raise AssertionError("unreachable")


def _is_one_of(func: Any, functions: frozenset) -> bool:
    try:
        return func in functions
    except TypeError:  # an unhashable callable is none of them
        return False


def _tensors(tree: Any) -> list[torch.Tensor]:
    return [leaf for leaf in tree_leaves(tree) if isinstance(leaf, torch.Tensor)]


def _tensor_list(dtypes: tuple[torch.dtype, ...], shapes: tuple[tuple[int, ...], ...]) -> str:
    """``(bf16, f32), ((2, 4), ())`` -> ``bf16[2,4] f32[]``."""
    return " ".join(f"{_dtype_name(d)}[{','.join(map(str, s))}]" for d, s in zip(dtypes, shapes, strict=True))


@dataclass(frozen=True)
class OpRecord:
    """One aten op as the dispatcher ran it, below autocast and autograd.

    Attributes:
        index: position of the op in the order ops ran (counting the ops a filter hides, so gaps
            in a filtered table show where hidden ops were).
        op: the op overload, as ``str(torch.ops.aten.addmm.default)``: ``"aten.addmm.default"``.
        phase: ``"forward"`` or ``"backward"`` (see the module docstring for how it is decided).
        node: in the backward pass, the autograd node running the op (``"AddmmBackward0"``); else ``""``.
        input_dtypes, input_shapes: dtype and shape of each tensor argument, in argument order.
        output_dtypes, output_shapes: dtype and shape of each tensor the op returned.
        is_cast: the op is an ``aten._to_copy`` that changed the dtype.
        cast_by: for casts, who asked for it: ``"autocast"``, ``"explicit"`` (``.to``, ``.float``, ...),
            ``"implicit"`` (inside another op, autocast off) or ``"backward"`` (the gradient of a
            forward cast, cast back by ``ToCopyBackward0``); ``""`` for other ops.
        bytes_cast: for casts, the bytes the cast wrote (the size of its output, a new copy); else 0.
        is_view: the op returns a view or alias of its input (``t``, ``view``, ``detach``, ...) and
            moves no data.
    """

    index: int
    op: str
    phase: str
    node: str
    input_dtypes: tuple[torch.dtype, ...]
    input_shapes: tuple[tuple[int, ...], ...]
    output_dtypes: tuple[torch.dtype, ...]
    output_shapes: tuple[tuple[int, ...], ...]
    is_cast: bool
    cast_by: str
    bytes_cast: int
    is_view: bool

    @property
    def output_dtype(self) -> torch.dtype | None:
        """The dtype of the first output (``None`` if the op returned no tensor)."""
        return self.output_dtypes[0] if self.output_dtypes else None

    @property
    def precision(self) -> str:
        """How the summary counts this op: ``"cast"``, ``"low"`` (a floating output is bf16/fp16),
        ``"fp32"`` (a floating output is float32, none is low) or ``"other"`` (integer, bool,
        float64 or no tensor output)."""
        if self.is_cast:
            return "cast"
        if any(d in LOW_PRECISION_DTYPES for d in self.output_dtypes):
            return "low"
        if torch.float32 in self.output_dtypes:
            return "fp32"
        return "other"


@dataclass(frozen=True)
class TraceSummary:
    """Counts over the rows of a :class:`Trace`; ``ops == low_precision_ops + fp32_ops + other_ops + casts``.

    Attributes:
        ops: number of rows.
        low_precision_ops: non-cast ops with a bf16/fp16 output.
        fp32_ops: non-cast ops with a float32 output and no low-precision one.
        other_ops: non-cast ops with no floating output of those kinds (integer, bool, float64, none).
        casts: dtype casts (``is_cast`` rows), of which
        casts_to_low: float32 -> bf16/fp16, and
        casts_to_fp32: bf16/fp16 -> float32.
        autocast_casts: casts with ``cast_by == "autocast"`` (the ones autocast inserted in the forward).
        bytes_cast: total bytes of the casts' outputs.
    """

    ops: int
    low_precision_ops: int
    fp32_ops: int
    other_ops: int
    casts: int
    casts_to_low: int
    casts_to_fp32: int
    autocast_casts: int
    bytes_cast: int

    def __str__(self) -> str:
        return (
            f"{self.ops} ops: {self.low_precision_ops} in low precision (bf16/fp16), {self.fp32_ops} in FP32, "
            f"{self.other_ops} other, {self.casts} casts\n"
            f"casts: {self.casts_to_low} FP32->low, {self.casts_to_fp32} low->FP32, "
            f"{self.autocast_casts} inserted by autocast; {_format_bytes(self.bytes_cast)} written by casts"
        )


def _check_filter(phases, include, exclude, keep_views, keep_allocs):
    """Validate the filter options; return ``(phases tuple, include regex, exclude regex)``."""
    if isinstance(phases, str):
        phases = (phases,)
    try:
        phases = tuple(phases)
    except TypeError:
        raise TypeError(f"phases must be a phase name or an iterable of them, got {phases!r}") from None
    unknown = [p for p in phases if p not in PHASES]
    if unknown or not phases:
        raise ValueError(f"phases must be a non-empty selection of {PHASES}, got {phases!r}")
    patterns = []
    for name, pattern in (("include", include), ("exclude", exclude)):
        if pattern is None or isinstance(pattern, re.Pattern):
            patterns.append(pattern)
        elif isinstance(pattern, str):
            try:
                patterns.append(re.compile(pattern))
            except re.error as error:
                raise ValueError(f"{name} is not a valid regular expression ({error}): {pattern!r}") from None
        else:
            raise TypeError(f"{name} must be None, a regex string or a compiled pattern, got {type(pattern).__name__}")
    for name, flag in (("keep_views", keep_views), ("keep_allocs", keep_allocs)):
        if not isinstance(flag, bool):
            raise TypeError(f"{name} must be True or False, got {flag!r}")
    return phases, patterns[0], patterns[1]


class Trace:
    """The ops recorded by :func:`trace`, filtered for reading.

    Attributes:
        rows: the recorded ops that pass the filter, in the order they ran (a tuple of :class:`OpRecord`).
        all_rows: every recorded op, unfiltered.
        result: what the traced callable returned.

    Show it with ``print(t.table())``, or as the last expression of a notebook cell (an HTML table);
    count with :meth:`summary`; look at a part with :meth:`filter`::

        t.filter(phases="backward", include=r"mm|_to_copy").table()
    """

    def __init__(
        self,
        records: Iterable[OpRecord],
        result: Any = None,
        *,
        phases: str | Iterable[str] = PHASES,
        include: str | re.Pattern | None = None,
        exclude: str | re.Pattern | None = None,
        keep_views: bool = False,
        keep_allocs: bool = False,
    ):
        self.all_rows: tuple[OpRecord, ...] = tuple(records)
        self.result = result
        self._options = dict(
            phases=phases, include=include, exclude=exclude, keep_views=keep_views, keep_allocs=keep_allocs
        )
        phases, include, exclude = _check_filter(phases, include, exclude, keep_views, keep_allocs)
        self.rows: tuple[OpRecord, ...] = tuple(
            row
            for row in self.all_rows
            if row.phase in phases
            and (keep_views or not row.is_view)
            and (keep_allocs or not _ALLOCATION_OPS.match(row.op))
            and (include is None or include.search(row.op))
            and (exclude is None or not exclude.search(row.op))
        )

    def filter(self, **options) -> Trace:
        """A new :class:`Trace` of the same ops with other filter options (those not given are kept).

        Options: ``phases`` (``"forward"``, ``"backward"`` or both), ``include`` / ``exclude``
        (regular expressions searched in the op name, e.g. ``r"mm|_to_copy"``), ``keep_views``
        (show view/alias ops such as ``t``, ``view``, ``detach``), ``keep_allocs`` (show ``empty*``).
        """
        unknown = set(options) - set(self._options)
        if unknown:
            raise TypeError(f"unknown filter option(s) {sorted(unknown)}; the options are {sorted(self._options)}")
        return Trace(self.all_rows, self.result, **{**self._options, **options})

    def summary(self) -> TraceSummary:
        """Count the rows by precision and the casts by direction (see :class:`TraceSummary`)."""
        casts = [row for row in self.rows if row.is_cast]
        precisions = [row.precision for row in self.rows]
        return TraceSummary(
            ops=len(self.rows),
            low_precision_ops=precisions.count("low"),
            fp32_ops=precisions.count("fp32"),
            other_ops=precisions.count("other"),
            casts=len(casts),
            casts_to_low=sum(
                r.input_dtypes[0] == torch.float32 and r.output_dtype in LOW_PRECISION_DTYPES for r in casts
            ),
            casts_to_fp32=sum(
                r.input_dtypes[0] in LOW_PRECISION_DTYPES and r.output_dtype == torch.float32 for r in casts
            ),
            autocast_casts=sum(r.cast_by == "autocast" for r in casts),
            bytes_cast=sum(r.bytes_cast for r in casts),
        )

    _HEADERS = ("#", "phase", "op", "inputs", "outputs", "cast", "autograd node")

    @staticmethod
    def _cells(row: OpRecord) -> tuple[str, ...]:
        cast = f"{row.cast_by} {_format_bytes(row.bytes_cast)}" if row.is_cast else ""
        return (
            str(row.index),
            row.phase,
            row.op,
            _tensor_list(row.input_dtypes, row.input_shapes),
            _tensor_list(row.output_dtypes, row.output_shapes),
            cast,
            row.node,
        )

    def _shown(self, max_rows: int | None) -> tuple[tuple[OpRecord, ...], int]:
        if max_rows is not None and (isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 0):
            raise ValueError(f"max_rows must be None or an int >= 0, got {max_rows!r}")
        shown = self.rows if max_rows is None else self.rows[:max_rows]
        return shown, len(self.rows) - len(shown)

    def table(self, max_rows: int | None = None) -> str:
        """The rows as a fixed-width text table (the first ``max_rows`` rows if given).

        Tensors are written ``dtype[shape]`` (``bf16[2,4]``); the cast column says who asked for
        each cast and how many bytes it wrote.
        """
        shown, hidden = self._shown(max_rows)
        lines = [self._HEADERS, *(self._cells(row) for row in shown)]
        widths = [max(len(line[i]) for line in lines) for i in range(len(self._HEADERS))]

        def render(cells: tuple[str, ...]) -> str:  # the index column right-aligned, the others left
            index, *rest = cells
            padded = [index.rjust(widths[0]), *(cell.ljust(w) for cell, w in zip(rest, widths[1:], strict=True))]
            return "  ".join(padded).rstrip()

        text = [render(line) for line in lines]
        text.insert(1, render(tuple("-" * w for w in widths)))
        if hidden:
            text.append(f"... {hidden} more rows")
        return "\n".join(text)

    def _repr_html_(self, max_rows: int | None = 200) -> str:
        """An HTML table for Jupyter: casts highlighted, low-precision outputs in bold."""
        shown, hidden = self._shown(max_rows)
        head = "".join(f"<th style='text-align:left'>{html.escape(h)}</th>" for h in self._HEADERS)
        body = []
        for row in shown:
            style = " style='background-color:rgba(255,200,0,0.25)'" if row.is_cast else ""
            cells = [html.escape(c) for c in self._cells(row)]
            if row.precision == "low":
                cells[4] = f"<b>{cells[4]}</b>"
            tds = "".join(f"<td style='text-align:left;font-family:monospace'>{c}</td>" for c in cells)
            body.append(f"<tr{style}>{tds}</tr>")
        if hidden:
            body.append(f"<tr><td colspan='{len(self._HEADERS)}'>... {hidden} more rows</td></tr>")
        summary = html.escape(str(self.summary())).replace("\n", "<br>")
        return f"<div><p>{summary}</p><table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table></div>"

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self) -> Iterator[OpRecord]:
        return iter(self.rows)

    def __str__(self) -> str:
        return f"{self.table()}\n\n{self.summary()}"

    def __repr__(self) -> str:
        return f"<Trace: {len(self.rows)} of {len(self.all_rows)} recorded ops shown>"


class _CallTracker(TorchFunctionMode):
    """Notes, for each Python-level torch call, whether it converts dtypes or starts a backward pass,
    and which devices have autocast on.

    A TorchFunctionMode is popped while its ``__torch_function__`` runs, so it sees only the
    outermost calls (``F.linear``, not what ``F.linear`` calls inside): exactly the calls the
    program itself made.
    """

    def __init__(self):
        super().__init__()
        self.kind = ""  # "convert", "backward" or "" (any other call)
        self.autocast_dtypes: dict[str, torch.dtype] = {}  # device type -> autocast's low dtype

    def __torch_function__(self, func, types, args=(), kwargs=None):
        saved = self.kind, self.autocast_dtypes
        if _is_one_of(func, _CONVERSION_METHODS):
            self.kind = "convert"
        elif _is_one_of(func, _BACKWARD_ENTRY_POINTS):
            self.kind = "backward"
        else:
            self.kind = ""
        # Read here, not in the dispatch mode: inside a TorchDispatchMode the Autocast keys are
        # excluded, so torch.is_autocast_enabled() is always False there.
        self.autocast_dtypes = {
            device: torch.get_autocast_dtype(device)
            for device in _AUTOCAST_DEVICE_TYPES
            if torch.is_autocast_enabled(device)
        }
        try:
            return func(*args, **(kwargs or {}))
        finally:
            self.kind, self.autocast_dtypes = saved

    def made_by_autocast(self, source: torch.Tensor, cast: torch.Tensor) -> bool:
        """Could autocast have made this cast (in the current call)?  Autocast casts only to its
        low-precision dtype or to float32, and only while enabled for the tensor's device."""
        low = self.autocast_dtypes.get(source.device.type)
        return low is not None and cast.dtype in (low, torch.float32)


class _OpRecorder(TorchDispatchMode):
    """Runs every op it sees and appends an :class:`OpRecord` for it."""

    def __init__(self, calls: _CallTracker):
        super().__init__()
        self.calls = calls
        self.records: list[OpRecord] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        self.records.append(self._record(func, args, kwargs, out))
        return out

    def _record(self, func, args, kwargs, out) -> OpRecord:
        inputs, outputs = _tensors((args, kwargs)), _tensors(out)
        backward = torch._C._current_graph_task_id() != -1 or self.calls.kind == "backward"
        node = torch._C._current_autograd_node() if backward else None
        is_cast = (
            func is torch.ops.aten._to_copy.default
            and len(inputs) == 1
            and len(outputs) == 1
            and inputs[0].dtype != outputs[0].dtype
        )
        if not is_cast:
            cast_by = ""
        elif backward:
            cast_by = "backward"
        elif self.calls.kind == "convert":
            cast_by = "explicit"
        elif self.calls.made_by_autocast(inputs[0], outputs[0]):
            cast_by = "autocast"
        else:
            cast_by = "implicit"
        return OpRecord(
            index=len(self.records),
            op=str(func),
            phase="backward" if backward else "forward",
            node=node.name().removeprefix("torch::autograd::") if node is not None else "",
            input_dtypes=tuple(t.dtype for t in inputs),
            input_shapes=tuple(tuple(t.shape) for t in inputs),
            output_dtypes=tuple(t.dtype for t in outputs),
            output_shapes=tuple(tuple(t.shape) for t in outputs),
            is_cast=is_cast,
            cast_by=cast_by,
            bytes_cast=outputs[0].numel() * outputs[0].element_size() if is_cast else 0,
            is_view=bool(getattr(func, "is_view", False)),
        )


def trace(
    fn: Callable[..., Any],
    *args: Any,
    phases: str | Iterable[str] = PHASES,
    include: str | re.Pattern | None = None,
    exclude: str | re.Pattern | None = None,
    keep_views: bool = False,
    keep_allocs: bool = False,
    **kwargs: Any,
) -> Trace:
    """Run ``fn(*args, **kwargs)`` and record every aten op it runs, below autocast and autograd.

    ``fn`` can be anything: a model (``trace(model, x)``), or a training step with autocast inside
    it and ``backward()`` after it.  Autocast is whatever ``fn`` sets up; :func:`trace` does not
    enable it.

    Args:
        fn: the callable to run.
        *args, **kwargs: passed to ``fn`` (except the filter options below, which are keyword-only).
        phases: which phases to show: ``"forward"``, ``"backward"`` or both (the default).
        include: if given, show only the ops whose name matches this regular expression (``re.search``).
        exclude: if given, hide the ops whose name matches this regular expression.
        keep_views: show view and alias ops (``t``, ``view``, ``expand``, ``detach``, ...); hidden by
            default because they move no data and never change a dtype.
        keep_allocs: show allocation-only ops (``empty``, ``empty_like``, ...); hidden by default.

    The filter only chooses what ``Trace.rows`` shows; ``Trace.all_rows`` keeps everything and
    ``Trace.filter`` re-filters.

    Returns:
        a :class:`Trace`; ``Trace.result`` is what ``fn`` returned.

    Example::

        >>> model, x = torch.nn.Linear(4, 3), torch.randn(2, 4)
        >>> def step():
        ...     with torch.autocast("cpu", dtype=torch.bfloat16):
        ...         out = model(x)
        ...     out.float().sum().backward()
        >>> t = trace(step, phases="forward")
        >>> [(row.op, row.cast_by) for row in t.rows]  # doctest: +NORMALIZE_WHITESPACE
        [('aten._to_copy.default', 'autocast'), ('aten._to_copy.default', 'autocast'),
         ('aten._to_copy.default', 'autocast'), ('aten.addmm.default', ''),
         ('aten._to_copy.default', 'explicit'), ('aten.sum.default', '')]
    """
    if not callable(fn):
        raise TypeError(
            f"trace(fn, ...): fn must be callable, e.g. `lambda: loss_fn(model(x), y).backward()`; "
            f"got a {type(fn).__name__}"
        )
    _check_filter(phases, include, exclude, keep_views, keep_allocs)  # fail before running fn
    calls = _CallTracker()
    recorder = _OpRecorder(calls)
    with calls, recorder:
        result = fn(*args, **kwargs)
    return Trace(
        recorder.records,
        result,
        phases=phases,
        include=include,
        exclude=exclude,
        keep_views=keep_views,
        keep_allocs=keep_allocs,
    )
