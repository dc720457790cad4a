"""Checks for exercise 00 (start here): three small tasks that prove the grading loop end to end."""

from __future__ import annotations

import itertools
import operator
import warnings
from collections import OrderedDict
from typing import NamedTuple

import torch

from ..device import (
    AUTOCAST_DEFAULT_DTYPES,
    FAST_FP16_WITHOUT_TENSOR_CORES,
    RECIPE_RULES,
    describe,
    generation,
    recommend,
)
from . import Returned, answer_of, collect, exact_bool, exact_number, fail, hints, passed, require_callable
from .facts import BYTES_PER_ELEMENT


def _tensor_bytes_cases() -> list[tuple[torch.Tensor, int, int | None]]:
    """(tensor, its number of elements, the elements of the storage a view shares or None): the counts are
    written out, not asked of the tensor, so that an answer cell that patches ``torch.Tensor`` cannot move
    what the check expects (the bytes per element come from :data:`facts.BYTES_PER_ELEMENT` the same way)."""
    return [
        (torch.zeros(1000, dtype=torch.float32), 1000, None),
        (torch.zeros(1000, dtype=torch.bfloat16), 1000, None),
        (torch.zeros(3, 5, dtype=torch.float16), 15, None),
        (torch.zeros(2, 2, 2, dtype=torch.float64), 8, None),
        (torch.zeros(7, dtype=torch.float8_e4m3fn), 7, None),
        (torch.zeros(100, dtype=torch.float32)[:10], 10, 100),  # a view (float32 whatever the default: rev25-r16 E1)
        (torch.zeros(4, 6, dtype=torch.float16)[:, ::2], 12, 24),  # a non-contiguous view
        (torch.zeros(3, 0, dtype=torch.float32), 0, None),  # no elements at all
        (torch.zeros(5, 4, dtype=torch.bool), 20, None),  # one byte per element, though a bool is one bit
    ]


def tensor_bytes(fn) -> None:
    """Task 1: ``tensor_bytes(t)`` returns how many bytes the elements of ``t`` take, as an int."""
    task = "Task 1 (tensor_bytes)"
    require_callable(task, fn, "tensor_bytes")
    # Every case is called first and judged afterwards (review rev25-r3 E6): no expected value exists while the
    # answer runs. The answers are kept frozen (checks.collect: plain values in a tuple) and the cases judged are made
    # again after the last call, from the constants, never the tensors the answer was handed (review rev25-r7 E1: its
    # function rewrote the check's case list through sys._getframe).
    answers = collect(task, fn, "tensor_bytes", [(t,) for t, _, _ in _tensor_bytes_cases()])
    cases = _tensor_bytes_cases()
    for (t, elements, storage), (got, error) in zip(cases, answers, strict=False):
        if error is not None:
            raise error
        dtype = str(t.dtype).removeprefix("torch.")
        size = BYTES_PER_ELEMENT[t.dtype]
        want = elements * size
        first = tuple(t.shape)[0]
        view = " view" if storage is not None else ""
        shape = f"a {tuple(t.shape)} {dtype} tensor{view}"
        if isinstance(got, Returned) and got.tensor:
            raise fail(task, f"for {shape} you returned a tensor ({got!r}); return a Python int, the number of "
                             "bytes: `t.numel()` and `t.element_size()` are ints already (or use `int(...)`).")
        number = exact_number(got)  # int's own ==, never the answer's type's (an int subclass equal to anything)
        if number is None:
            kind = got.kind if isinstance(got, Returned) else type(got).__name__
            raise fail(task, f"for {shape} you returned {got!r} ({kind}); return a number of bytes, as an int.")
        got = number
        if isinstance(got, float) and got == want:
            raise fail(task, f"for {shape} you returned {got!r}, a float: a byte count is a whole number, and "
                             "the task asks for an int. Return `t.numel() * t.element_size()` without float().")
        if got == want and isinstance(got, int):
            continue
        if storage is not None and got == storage * size:
            raise fail(task, f"for {shape} you returned {got}, the size of the whole storage it shares with the "
                             f"tensor it was sliced from. Count only the view's own elements.")
        if t.dim() > 1 and got == first * size and elements:
            raise fail(task, f"for {shape} you returned {got}: len(t) counts only the first dimension "
                             f"({first}), not the {elements} elements. Use `t.numel()`.")
        if got == size and elements > 1:
            raise fail(task, f"for {shape} you returned {got}, the bytes of *one* element. Multiply by the number "
                             "of elements, `t.numel()`.")
        if got == elements:
            raise fail(task, f"for {shape} you returned {got}, the number of elements. Multiply by the "
                             "bytes per element, `t.element_size()`.")
        if got == want * 8:
            raise fail(task, f"for {shape} you returned {got}, which is bits. A byte is 8 bits: use "
                             "`t.element_size()`, which is already in bytes.")
        if got == elements * 4:
            raise fail(task, f"for {shape} you returned {got}: 4 bytes per element, as if it were float32. "
                             f"Each {dtype} element takes {size}: use `t.element_size()`.")
        if isinstance(got, float):
            raise fail(task, f"for {shape} you returned {got!r}, a float; return the number of bytes as an int "
                             f"({elements} elements × {size} bytes).")
        raise fail(task, f"for {shape} you returned {got}, expected {want} "
                         f"({elements} elements × {size} bytes).")
    passed(task, f"byte counts right for {len(cases)} tensors (float64 down to float8, bool, empty, views) — "
                 "bfloat16 and float16 take half the bytes of float32.")


#: the input element the first Linear's output unit 0 reads with weight +SCALE, beside PROBE_BASE it reads with weight
#: -SCALE: 2**-17 * (1 + 2**-9) rounds to 2**-17 in bfloat16 (7 mantissa bits: 2**-9 is a quarter of its spacing) and
#: in float16 (2**-17 is a subnormal there, spacing 2**-24: 2**-26 is a quarter of it), but is exact in float32 and in
#: TF32 (10 mantissa bits and float32's exponent range: an Ampere GPU's float32 matmul with
#: ``torch.backends.cuda.matmul.allow_tf32``/``set_float32_matmul_precision("high")``), so under autocast that unit is
#: 0 and in a float32 or TF32 matmul SCALE * 2**-26 = 2**-11, a normal number in both 16-bit dtypes, whatever
#: rounding comes after (review rev25-r9 W1, rev25-r10 W1: ``1 + 2**-12`` rounded to 1 under TF32 as well)
PROBE_BASE = 2.0**-17
PROBE = PROBE_BASE * (1 + 2.0**-9)
SCALE = 2.0**15  # a float16 (max 65504) and a bfloat16 exactly


def _model_and_input(device: torch.device) -> tuple[torch.nn.Sequential, torch.Tensor]:
    """Task 2's model and input: a seeded MLP whose first Linear's unit 0 computes ``SCALE * (x[:, 0] - x[:, 1])``,
    with ``x[:, 0] = PROBE`` and ``x[:, 1] = PROBE_BASE``: 0 when the Linear multiplies 16-bit copies (autocast, fused
    or not: both products, 0.25 each, and their difference are exact), 2**-11 when it multiplies the float32 values,
    or their TF32 roundings. A float32 forward rounded to 16 bits afterwards leaves the 2**-11, which a 16-bit value
    can hold. The output itself is compared within rounding, not bitwise with an eager autocast forward: a compiled or
    autotuned forward (torch.compile) may pick another kernel or accumulation order. (Inductor's unfusing of a bias
    add from its matmul, ``unfuse_bias_add_to_pointwise`` in torch/_inductor/fx_passes/post_grad.py, is no reason on
    its own: with ``torch._inductor.config.keep_addmm_fused_for_half_dtypes``, True by default in torch 2.13, a
    bfloat16/float16 addmm stays fused, except on XPU; review rev25-r11 N1.)

    Why a value and not a setting (review rev25-r10 W1): TF32 is told apart by the numbers, whatever
    ``allow_tf32``/``fp32_precision`` say while the layer runs, so the check changes no backend flag (switching the
    precision to "highest" around the call would not hold either: the answer's own hooks can switch it back while the
    Linear runs, as they can autocast, and ``set_float32_matmul_precision`` turns torch 2.13's per-backend "none"
    into "ieee", which is not putting it back). Float16 and bfloat16 are told apart by range and precision together:
    TF32 shares float16's 10 mantissa bits and bfloat16's exponent range, so a value has to be beyond float16's range
    (a subnormal) and beyond bfloat16's precision at once. Not told apart, where oneDNN takes its bf32 path (reasoning:
    CPUs with AMX; on an AVX-512 CPU with avx512_bf16 and no AMX both settings below still gave 2**-11, review
    rev25-r11 N2): a float32 matmul that torch itself computes from bfloat16 roundings of its inputs
    (``set_float32_matmul_precision("medium")`` or ``torch.backends.mkldnn.matmul.fp32_precision = "bf16"``) is
    bfloat16's arithmetic, and a float32 layer run so and rounded in the answer's hooks would pass the probe. Only the
    first Linear holds a probe unit, and an answer that knows the probe can write it (review rev25-r11 W1)."""
    torch.manual_seed(0)
    f32 = torch.float32  # whatever the default dtype (a direct call outside the cell hook: review rev25-r15 N1)
    model = torch.nn.Sequential(torch.nn.Linear(64, 32, dtype=f32), torch.nn.ReLU(),
                                torch.nn.Linear(32, 8, dtype=f32)).to(device)
    x = torch.randn(16, 64, device=device, dtype=f32)
    with torch.no_grad():
        model[0].weight[0].zero_()
        model[0].weight[0, :2] = torch.tensor([SCALE, -SCALE])
        model[0].bias[0] = 0.0
        x[:, 0], x[:, 1] = PROBE, PROBE_BASE
    return model, x


class _Layer(NamedTuple):
    """What the check's hooks saw one layer do (:func:`_watch`), frozen when the layer ran: bools, dtypes, strs, ints
    and tuples of Python floats, nothing an answer can change in place (review rev25-r11 E2: an answer rewrote the
    dicts of tensors the check held, through ``sys._getframe``)."""

    seq: int  # its place among the layer calls: the pre-hooks' own count must agree (:func:`_records`)
    layer: str
    autocast: bool
    dtype: torch.dtype
    before: tuple | None  # (enabled, dtype) read by the layer's pre-hook
    call: int  # which of the pre-hooks' calls `before` was read from: records() compares them (rev25-r13 E2)
    other: tuple  # the other device types with autocast on
    starts: bool  # the first layer: a forward pass begins
    input: tuple | None  # the first layer's input: (shape, its float32 values row by row)
    probe: tuple | None  # the first Linear's unit 0, as Python floats
    result: tuple | None  # the last layer's output: (dtype, shape, its float32 values row by row)
    output: torch.dtype


def _values(t: torch.Tensor) -> tuple | None:
    """``t``'s shape and its elements as float32 Python floats, row by row (dim-0 chunks concatenate), or None where
    they cannot be read (a batched tensor inside ``torch.vmap``, which has no storage)."""
    try:
        t = torch.Tensor.detach(t)
        return tuple(t.shape), tuple(torch.Tensor.tolist(torch.Tensor.reshape(torch.Tensor.float(t), -1)))
    except RuntimeError:
        return None


def _watch(model: torch.nn.Module, device_type: str) -> tuple[list, object]:
    """Forward pre-hooks and forward hooks on every layer of ``model`` (their handles) and a function that gives what
    they saw (:func:`_records`): what autocast state each layer really ran under, read before it ran and after (a
    state switched between the two shows: review rev25-r8 E3), the dtype it produced, the first layer's input and its
    probe unit (:func:`_model_and_input`), and the last layer's output (which forward passes made the returned
    tensor), each as a frozen :class:`_Layer`.

    The records are kept by the hooks' closures, not in a local of the check's frame while the answer runs, and
    the pre-hooks count the layer calls in a store of their own: :func:`_records` refuses records that do not
    agree with that count, one by one (review rev25-r11 E2)."""
    store: list[_Layer] = []
    calls: list[tuple[int, tuple[bool, torch.dtype]]] = []  # the pre-hooks' own: (id of the module, state)
    first, last = model[0], model[-1]

    def state() -> tuple[bool, torch.dtype]:
        return torch.is_autocast_enabled(device_type), torch.get_autocast_dtype(device_type)

    def pre_hook(module, inputs):
        calls.append((id(module), state()))

    def hook(module, inputs, output):
        at = next((i for i in range(len(calls) - 1, -1, -1) if calls[i][0] == id(module)), -1)
        store.append(_Layer(
            seq=len(store),
            layer=type(module).__name__,
            autocast=torch.is_autocast_enabled(device_type),
            dtype=torch.get_autocast_dtype(device_type),
            before=calls[at][1] if at >= 0 else None,
            call=at,
            other=tuple(t for t in ("cpu", "cuda", "mps") if t != device_type and torch.is_autocast_enabled(t)),
            starts=module is first,
            input=_values(inputs[0]) if module is first else None,
            probe=(_values(output[..., 0]) or (None, None))[1] if module is first else None,
            result=(output.dtype, *_values(output)) if module is last and _values(output) is not None else None,
            output=output.dtype,
        ))

    handles = [layer.register_forward_pre_hook(pre_hook, prepend=True) for layer in model]
    handles += [layer.register_forward_hook(hook) for layer in model]

    def records() -> tuple[tuple[_Layer, ...], bool]:
        taken, counted = tuple(store), tuple(calls)
        agree = (len(taken) == len(counted)
                 and all(type(r) is _Layer and r.seq == i and type(r.call) is int for i, r in enumerate(taken))
                 and sorted(r.call for r in taken) == list(range(len(counted)))
                 and all(type(c) is tuple and len(c) == 2 and type(c[0]) is int and _is_state(c[1])
                         and _is_state(r.before) and r.before == c[1]
                         for r, c in zip(taken, [counted[r.call] for r in taken], strict=True)))
        return taken, agree

    return handles, records


def _is_state(state: object) -> bool:
    """Whether ``state`` is an ``(enabled, dtype)`` pair of exact types (a bool and a torch.dtype), whose ``==`` runs
    no code of an answer's."""
    return type(state) is tuple and len(state) == 2 and type(state[0]) is bool and type(state[1]) is torch.dtype


def _torch_globals() -> tuple[tuple[int, int], tuple]:
    """torch's process-wide state through which code of an answer's could run inside the check after its call, read
    without calling any of it: the lengths of the torch function mode stack and the dispatch mode stack (and their
    modes, by identity: :func:`_mode_stacks`), and every
    ``_global_*`` entry of ``torch.nn.modules.module`` (the global module hooks: forward, pre-forward, backward,
    module/parameter/buffer registration), the object and, for an exact dict, its keys and hooks, compared by
    identity (:func:`_same_globals`; review rev25-r13 E1: a global forward hook and a torch function mode the answer
    left on rewrote the check's ``seen``, then took themselves out)."""
    space = vars(torch.nn.modules.module)
    hooks: list = []
    for name in sorted(n for n in space if type(n) is str and n.startswith("_global_")):
        value = space[name]
        hooks += (name, value)
        if type(value) is dict or type(value) is OrderedDict:
            hooks += itertools.chain.from_iterable(dict.items(value))
    stacks = _mode_stacks()  # the modes themselves, by identity
    return (len(stacks[0]), len(stacks[1])), (*hooks, *stacks[0], *stacks[1])


def _same_globals(a: tuple, b: tuple) -> bool:
    """Whether two :func:`_torch_globals` readings agree: equal stack lengths, and the same objects, by identity."""
    return a[0] == b[0] and len(a[1]) == len(b[1]) and all(map(operator.is_, a[1], b[1]))


def _mode_stacks() -> tuple[tuple, tuple]:
    """The torch function mode stack and the dispatch mode stack, bottom first, each entry the mode object itself (to
    be compared by identity), read without calling any of it."""
    return (tuple(map(torch._C._get_function_stack_at, range(torch._C._len_torch_function_stack()))),
            tuple(map(torch._C._get_dispatch_stack_at, range(torch._C._len_torch_dispatch_stack()))))


def _default_device() -> tuple:
    """What ``torch.set_default_device`` changes: the thread's ``DeviceContext`` (``_GLOBAL_DEVICE_CONTEXT``, absent
    when it was never set) and ``torch.utils._device.CURRENT_DEVICE``."""
    import torch.utils._device as device_module

    return (getattr(torch._GLOBAL_DEVICE_CONTEXT, "device_context", _NEVER_SET), device_module.CURRENT_DEVICE)


_NEVER_SET = object()


def _is_device_context(mode: object) -> bool:
    """Whether ``mode`` is torch's own ``DeviceContext`` as ``torch.set_default_device`` makes it: of that exact type,
    with only the attributes torch gives it and a ``torch.device``: its ``__torch_function__`` is torch's code."""
    from torch.utils._device import DeviceContext

    if type(mode) is not DeviceContext:
        return False
    attributes = object.__getattribute__(mode, "__dict__")
    return (type(attributes) is dict and set(attributes) <= {"device", "prev_mode", "old_device"}
            and type(attributes.get("device")) is torch.device)


def _modes_changed(before: tuple[tuple, tuple], after: tuple[tuple, tuple]) -> str | None:
    """What the answer did to the mode stacks (:func:`_mode_stacks` before and after its call), compared by identity:
    ``"entered"`` (a mode left entered), ``"exited"`` (a mode on before the call taken out), or None. torch's own
    ``DeviceContext``, which ``torch.set_default_device`` puts at the *bottom* of the stack and takes out again, is no
    change of the answer's (review rev25-r14 E2)."""
    was, now = before[0] + before[1], after[0] + after[1]
    if any(not any(map(operator.is_, was, itertools.repeat(mode))) and not _is_device_context(mode) for mode in now):
        return "entered"
    if any(not any(map(operator.is_, now, itertools.repeat(mode))) and not _is_device_context(mode) for mode in was):
        return "exited"
    return None


def _put_modes_back(before: tuple[tuple, tuple], device: tuple) -> None:
    """Put the mode stacks and the default device back as they were before the call (:func:`_mode_stacks`,
    :func:`_default_device`), without calling any mode's ``__exit__``: the torch function stack is rebuilt from the
    modes saved, so a mode entered anywhere in it (``set_default_device``'s, at the bottom) is taken out and none that
    was on before the call is (review rev25-r14 E2: popping from the top took out the learner's own mode); the
    dispatch stack, where modes are entered on top only, loses the modes above its length."""
    import torch.utils._device as device_module

    while torch._C._len_torch_function_stack():
        torch._C._pop_torch_function_stack()
    for mode in before[0]:
        torch._C._push_on_torch_function_stack(mode)
    while torch._C._len_torch_dispatch_stack() > len(before[1]):
        torch._C._pop_torch_dispatch_stack()
    context, current = device
    if context is _NEVER_SET:
        vars(torch._GLOBAL_DEVICE_CONTEXT).pop("device_context", None)
    else:
        torch._GLOBAL_DEVICE_CONTEXT.device_context = context
    device_module.CURRENT_DEVICE = current


def _autocast_state() -> tuple:
    """The process-wide autocast state, frozen: ``((device, enabled, dtype), ...)``, the cache flag, and the nesting
    level (read by one increment and its decrement)."""
    from .state import _device_types

    level = torch.autocast_increment_nesting() - 1
    torch.autocast_decrement_nesting()
    return (tuple((d, torch.is_autocast_enabled(d), torch.get_autocast_dtype(d)) for d in _device_types()),
            torch.is_autocast_cache_enabled(), level)


def _put_autocast_back(saved: tuple) -> None:
    """Put back :func:`_autocast_state`'s ``saved``: each device's flag and dtype, the cache flag, and the nesting
    level (a region entered and never left keeps it raised, and the cast cache is then never cleared)."""
    devices, cache, level = saved
    for device, enabled, dtype in devices:
        torch.set_autocast_enabled(device, enabled)
        torch.set_autocast_dtype(device, dtype)
    now = _autocast_state()[2]
    for _ in range(max(0, now - level)):
        if torch.autocast_decrement_nesting() == 0:
            torch.clear_autocast_cache()
    torch.set_autocast_cache_enabled(cache)


def amp_forward(fn) -> None:
    """Task 2: ``amp_forward(model, x)`` runs the forward pass under autocast on the course device.

    Forward pre-hooks and forward hooks on every layer record whether autocast was on *while that layer ran*, its
    dtype and the dtype each layer produced: a float32 forward whose output is converted afterwards
    (``model(x).to(torch.bfloat16)``, a ``.bfloat16()`` copy of the model) is not autocast, nor is one with autocast
    switched between the two hooks, and under a 16-bit recipe every ``Linear`` must have produced that dtype (Linear
    is on autocast's lower-precision list): a float32 forward with autocast switched on only around the check's
    hooks is seen (review rev25-r8 E3), and so is a float32 layer whose output an answer's own hook rounds to 16 bits
    while autocast is switched on around the check's hooks: the first Linear's probe unit (:func:`_model_and_input`)
    is 0 only when the Linear multiplied 16-bit copies, not float32 nor TF32 ones (review rev25-r9 W1, rev25-r10 W1).
    The records judged are those of the forward pass that made the returned tensor, or of the consecutive passes whose
    outputs joined along dim 0 make it (micro-batches, review rev25-r11 W2): another forward run or printed besides
    them is the answer's own (review rev25-r9 M1).

    Reference first, frozen (review rev25-r11 E2, rev25-r14 M2): while the answer runs nothing the check judges by
    is in a frame it can reach as a mutable object; the reference and the input are readable there, but not
    writable, and not what the verdict rests on. The hooks keep frozen records (:class:`_Layer`) in their
    closures, checked afterwards against the pre-hooks' own record of each layer call, the ``(enabled, dtype)`` each
    read (:func:`_watch`: rewriting the forward hooks' store alone is seen, review rev25-r13 E2), and the reference
    and the input compared with are made before the call from the check's constants and frozen as Python floats
    (:func:`_values`), so that no forward of the check's own runs after the answer's (review rev25-r13 E1: the
    answer's global module hooks fired in it). It is called through :func:`~ampcourse.checks.answer_of`
    (``freeze=False``: the tensor is judged), so a trace function it leaves on, or a ``frame.f_trace`` on this frame,
    fails it (review rev25-r12 E1); a torch function or dispatch mode it leaves entered fails it, and torch's global
    module hooks and mode stacks, read right after the call, must be the same right before ``passed()``
    (:func:`_torch_globals`: a hook or mode that runs inside the check and takes itself out, review rev25-r13 E1).
    What this does not defend against: code written to reach into the check's own objects while it runs (rewriting
    both of the hooks' stores through their closures, a finalizer timed to run inside the check, ``sys.monitoring``,
    CPython 3.13's writable ``frame.f_locals``), CONTRIBUTING "The grading guard". An answer that leaves autocast's
    global state changed (a region entered with ``__enter__()`` and never left, ``torch.set_autocast_enabled``)
    fails, and the state, nesting level included, is put back for the later cells (review rev25-r11 E3).

    Where the recipe is float32 (a GPU such as the GTX 1080, :data:`ampcourse.device.RECIPE_RULES`) AMP is off:
    the forward must run with autocast off. ``torch.autocast("cuda", dtype=torch.float32)`` does not turn itself
    off (its supported-dtype check in ``torch/amp/autocast_mode.py`` covers the other devices only); on the CPU
    the same call warns and disables itself. Both are named.
    """
    task = "Task 2 (amp_forward)"
    require_callable(task, fn, "amp_forward")
    hardware = describe()
    device, dtype = hardware.device, hardware.recommendation.dtype
    want = str(dtype).removeprefix("torch.")
    region = f"`with torch.autocast(device_type={device.type!r}, dtype=torch.{want}):`"
    # Nothing the check judges by exists in a frame the answer can reach while it runs, but as frozen values (review
    # rev25-r11 E2): the hooks' records are frozen and kept by their closures (_watch), the reference, the input and
    # the autocast state before the call are tuples of frozen values.
    # The reference, before the call (review rev25-r13 E1: made after it, its forward ran the answer's global module
    # hooks inside the check), frozen as Python floats; the input compared with too, from the check's constants.
    model_again, x_again = _model_and_input(device)
    with torch.no_grad():
        reference = _values(model_again(x_again))
    x_again = _values(x_again)
    del model_again
    model, x = _model_and_input(device)
    handles, records = _watch(model, device.type)
    autocast_before = _autocast_state()
    modes_before, device_before = _mode_stacks(), _default_device()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            # answer_of, as the other tasks' collect: a trace function the answer leaves on, or an f_trace on this
            # frame, could rewrite `seen` after the call (review rev25-r12 E1); it fails the call, raised here
            out, failure = answer_of(task, fn, "amp_forward", (model, x), freeze=False)
        if failure is not None:
            raise failure
    finally:
        # torch's global hooks and mode stacks as the answer left them, compared again before passed() (rev25-r13
        # E1); a mode left entered is taken out, as autocast's state is put back, for the later cells
        modes_changed = _modes_changed(modes_before, _mode_stacks())
        _put_modes_back(modes_before, device_before)  # set_default_device's mode too, for the later cells
        torch_after = _torch_globals()
        for handle in handles:
            handle.remove()
        autocast_after = _autocast_state()
        _put_autocast_back(autocast_before)  # later cells run in the state they had, whatever the answer left
    # What is read of the answer's objects (the warnings it raised, the model it was handed) runs code of its own
    # (a warning's __str__, a `parameters` set on the model): through answer_of too, before `seen` exists, so a
    # trace function that code leaves on fails the check as the answer's call would (review rev25-r12 E1)
    read, failure = answer_of(task, _after_the_call, "amp_forward", (model, caught))
    if failure is not None:
        raise failure
    weight_dtypes, refused = read
    # `handles` and `records` live until the check returns: what the answer put in their closures is not freed here,
    # where a finalizer of its own would run inside the check (review rev25-r13 fin.py)
    seen, agree = records()
    if modes_changed == "entered":
        raise fail(task, "your function left a torch function mode or dispatch mode entered when it returned "
                         "(`TorchFunctionMode().__enter__()` without `__exit__`): through it code of yours runs "
                         "inside the check and in every later cell. Use `with` for modes, which leaves them.")
    if modes_changed == "exited":
        raise fail(task, "your function took out a torch function mode or dispatch mode that was on before it was "
                         "called (`__exit__()` of a mode it did not enter): leave the modes you did not enter alone.")
    if autocast_after != autocast_before:  # review rev25-r11 E3: a region entered and never left
        left = [d for (d, on, _), (_, was, _) in zip(autocast_after[0], autocast_before[0], strict=True)
                if on and not was]
        what = (f"leaves {', '.join(left)} autocast switched on after it returns" if left else
                "changes autocast's global state (its dtype, cache flag or nesting) and leaves it so after it returns")
        raise fail(task, f"your function {what} (`torch.autocast(...).__enter__()` without `__exit__`, or "
                         "`torch.set_autocast_enabled`): every later cell would run under it. Use `with "
                         "torch.autocast(...):`, which switches it off again when the block ends.")
    if not agree:
        raise fail(task, "the check's records of the layers do not agree with its own count of the layer calls: "
                         "your function changed what the check's forward hooks recorded. Leave the check's hooks "
                         "and what they keep alone.")
    reference = torch.tensor(reference[1], dtype=torch.float32, device=device).reshape(reference[0])
    x = torch.tensor(x_again[1], dtype=torch.float32).reshape(x_again[0])
    if weight_dtypes != ("float32",):
        found = ", ".join(weight_dtypes)
        advice = ("leave the model as it is and wrap the call in `torch.autocast`." if dtype != torch.float32 else
                  "leave the model as it is: this device's recipe is float32 (AMP off), so run it in float32.")
        raise fail(task, f"the model's weights are now {found}: you converted the model (`.half()`, "
                         f"`.to(dtype)`). autocast keeps the weights in float32 and casts per operation; {advice}")
    if not isinstance(out, torch.Tensor):
        raise fail(task, f"return the model's output tensor (you returned {type(out).__name__}).")
    if not seen:
        raise fail(task, "the model you were given never ran (its layers' forward hooks did not fire): a copy "
                         "of it, or no forward at all. Call `model(x)` itself inside the autocast region.")
    seen, passes, found = _pass_returned(seen, out)
    if passes > 1 and not found:  # several forwards, and the tensor returned is the output of none
        method = {"float32": "float"}.get(_name(out.dtype), _name(out.dtype))  # .float(), not .float32() (rev25-r10 N1)
        kinds = sorted({"under autocast" if s.autocast else "with autocast off" for s in seen if s.starts})
        if dtype != torch.float32 and all(s.autocast and s.dtype == dtype and s.before == (True, dtype)
                                          for s in seen):  # nothing to convert: every pass ran as it should
            raise fail(task, f"the model ran {passes} forward passes, all under {device.type} autocast in {want}, "
                             f"but the tensor you returned is not the output of your `model(x)` calls (nor their "
                             f"micro-batches joined along dim 0 in order). Return the `model(x)` you ran inside "
                             f"{region} as it is, or `torch.cat` of its micro-batches' outputs in order.")
        raise fail(task, f"the model ran {passes} forward passes ({' and '.join(kinds)}), and the tensor you "
                         f"returned ({_name(out.dtype)}) is none of their outputs as it was: a forward's output "
                         f"converted afterwards (`.to(...)`, `.{method}()`) is not autocast's. Return the "
                         f"`model(x)` you ran inside {region} as it is.")
    first = seen[0]
    autocast_wanted = dtype != torch.float32  # float32: a GPU where the course trains without AMP (RECIPE_RULES)
    off = ("turn autocast off yourself with `enabled=rec.dtype != torch.float32` in torch.autocast, or call "
           "`model(x)` without a region")
    if not autocast_wanted and refused:
        raise fail(task, f"torch.autocast warned \"{refused}\": float32 is no "
                         f"autocast dtype (on CUDA the same call stays on instead). This device's recipe is "
                         f"float32, AMP off: {off}.")
    if not autocast_wanted and any(s.autocast for s in seen):
        on = next(s for s in seen if s.autocast)
        got = str(on.dtype).removeprefix("torch.")
        if on.dtype == torch.float32:
            raise fail(task, f"your forward ran with {device.type} autocast on, in float32: "
                             "torch.autocast(\"cuda\", dtype=torch.float32) does not turn itself off. This "
                             f"device's recipe is float32, AMP off: {off}.")
        raise fail(task, f"your forward ran under {device.type} autocast in {got}, but this device's recipe is "
                         f"float32, AMP off ({hardware.recommendation.reason}): {off}.")
    if autocast_wanted and not first.autocast:
        if first.other:
            raise fail(task, f"autocast was on for {', '.join(first.other)}, not for {device.type}, where the "
                             f"tensors are: the device_type must match the device. Use {region}")
        converted = (" Your output is " + str(out.dtype).removeprefix("torch.") + ": converting a float32 "
                     "forward's output (or a 16-bit copy of the model) is not autocast.") \
            if out.dtype != torch.float32 else ""
        raise fail(task, f"the layers ran with autocast off, so the forward pass did not run under autocast on "
                         f"{device.type}.{converted} Wrap `model(x)` in {region} (the device_type must match "
                         "where the tensors are).")
    if autocast_wanted and first.dtype != dtype:
        got = str(first.dtype).removeprefix("torch.")
        raise fail(task, f"autocast ran in {got}, but the recommended AMP dtype on this {device.type} device is "
                         f"{want}: pass `dtype=torch.{want}` to torch.autocast (see `describe().recommendation`; "
                         f"without dtype= autocast uses its per-device default, "
                         f"{str(AUTOCAST_DEFAULT_DTYPES[device.type]).removeprefix('torch.')} here).")
    outside = [s.layer for s in seen if s.autocast != autocast_wanted]
    if outside:
        raise fail(task, f"part of the forward ran outside the autocast region ({', '.join(outside)}): the "
                         "whole `model(x)` call belongs inside it.")
    switched = [s.layer for s in seen if s.before != (s.autocast, s.dtype)]
    if switched:
        raise fail(task, f"autocast's state changed while {', '.join(switched)} ran (between the layer's forward "
                         "pre-hook and its forward hook): run the whole `model(x)` inside one autocast region, "
                         "without switching autocast in hooks or inside the model.")
    low = [s.output for s in seen if autocast_wanted and s.layer == "Linear" and s.output != dtype]
    if low:  # Linear is on autocast's lower-precision list (CPU and CUDA): under autocast it makes `dtype`
        raise fail(task, f"the Linear layers produced {_name(low[0])}, but under {device.type} autocast in {want} a "
                         f"Linear layer computes in {want}: "
                         "the layers did not really run under autocast (switched off around them, or their output "
                         f"converted). Run `model(x)` inside {region} and return its output as it is.")
    starts = [s for s in seen if s.starts]  # one per forward pass judged (a micro-batched answer: several)
    if starts and all(s.input is not None for s in starts):  # its own input: rev25-r10 E2
        seen_input = torch.cat([torch.tensor(s.input[1], dtype=torch.float32).reshape(s.input[0]) for s in starts])
        if not torch.equal(seen_input, x):  # equal needs equal shapes too; x from the values read before the call
            if seen_input.shape == x.shape and torch.allclose(seen_input, x, rtol=2.0**-7, atol=0):
                raise fail(task, "the model saw a rounded copy of your input: you converted `x` (`.half()`, "
                                 "`.to(dtype)`) before the forward. Pass `x` as it is: autocast casts per operation.")
            raise fail(task, "the model did not see the input you were given: return `model(x)` computed on `x`.")
    probe = max((abs(v) for s in starts if s.probe is not None for v in s.probe), default=0.0)
    if autocast_wanted and probe != 0:
        raise fail(task, f"the first Linear computed in float32: one of its outputs is 2**15 * (x[:, 0] - x[:, 1]) "
                         f"with x[:, 0] = 2**-17 * (1 + 2**-9) and x[:, 1] = 2**-17, which is 0 when the Linear "
                         f"multiplies {want} copies (x[:, 0] rounds to 2**-17 in {want}) but came out as "
                         f"{probe:.3g}, the answer of float32 (or TF32): a float32 forward "
                         f"rounded to {want} afterwards (in hooks, or layer by layer) is not autocast. Run `model(x)` "
                         f"inside {region} and return its output as it is.")
    if out.dtype != seen[-1].output:
        raise fail(task, f"the model's last layer produced {str(seen[-1].output).removeprefix('torch.')}, but "
                         f"you returned {str(out.dtype).removeprefix('torch.')}: return the output as autocast "
                         "made it, without converting it.")
    if out.shape != reference.shape:
        raise fail(task, f"the output has shape {tuple(out.shape)}, expected {tuple(reference.shape)}: "
                         "return `model(x)` itself.")
    error = (torch.Tensor.float(out) - reference).abs().max().item()  # through the class (review rev25-r6 E3)
    if error > 0.05:
        raise fail(task, f"the output differs from the float32 forward by {error:.3g}, more than {want} "
                         "rounding explains: return `model(x)` computed on the input you were given.")
    if not _same_globals(_torch_globals(), torch_after):
        raise fail(task, "torch's global module hooks or its torch function / dispatch mode stack changed while the "
                         "check ran, after your function returned: code of yours (a global hook registered with "
                         "`torch.nn.modules.module.register_module_forward_hook`, a mode) ran inside the check. "
                         "Leave what you register on, or take it out before your function returns.")
    if not autocast_wanted:
        passed(task, "this GPU's recipe is FP32 (device.RECIPE_RULES): the forward ran without autocast and the "
                     "weights stayed float32.")
        return
    passed(task, f"every layer ran under {device.type} autocast in {want} (seen by forward hooks); the weights "
                 "stayed float32 and the output matches float32 to within rounding.")


def _after_the_call(model: torch.nn.Module, caught: list) -> tuple[tuple[str, ...], str]:
    """What :func:`amp_forward` reads of the answer's objects after its call, called through ``answer_of``: the
    names of the model's weight dtypes, and the first line of torch.autocast's "Disabling autocast" warning ("" if
    none); the answer's other warnings are shown, theirs to see."""
    weights = tuple(sorted({_name(p.dtype) for p in model.parameters()}))
    refused = [w for w in caught if "Disabling autocast" in str(w.message)]
    for w in caught:
        if w not in refused:
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    return weights, str(refused[0].message).splitlines()[0] if refused else ""


def _pass_returned(seen: tuple[_Layer, ...], out: torch.Tensor) -> tuple[list[_Layer], int, bool]:
    """``(records, passes, found)``: the layers' records of the forward passes whose last layers made ``out``, else
    all of them; how many passes ran; and whether some did. ``out`` is made by one pass whose output equals it in
    dtype and every bit (the tensor itself, or ``.detach()``), or by consecutive passes whose outputs, joined along
    dim 0, do (a micro-batched forward, ``torch.cat([model(c) for c in x.split(8)])``: review rev25-r11 W2). An answer
    may run or print another forward besides the ones it returns (review rev25-r9 M1)."""
    passes: list[list[_Layer]] = []
    for record in seen:
        if record.starts or not passes:
            passes.append([])
        passes[-1].append(record)
    if type(out) not in (torch.Tensor, torch.nn.Parameter) or torch.Tensor.dim(out) == 0:
        return list(seen), len(passes), False
    read = _values(out)
    if read is None:
        return list(seen), len(passes), False
    shape, values = read
    results = [p[-1].result for p in passes]
    for i in range(len(passes)):
        rows, joined = 0, ()
        for j in range(i, len(passes)):
            result = results[j]
            if result is None or result[0] != out.dtype or len(result[1]) != len(shape) or result[1][1:] != shape[1:]:
                break
            rows, joined = rows + result[1][0], joined + result[2]
            if rows > shape[0] or joined != values[:len(joined)]:
                break
            if rows == shape[0] and len(joined) == len(values):
                return [r for p in passes[i:j + 1] for r in p], len(passes), True
    return list(seen), len(passes), False


# --- Task 3: the recipe for other machines --------------------------------------------------------------------

GPU_NAMES = {  # compute capability -> a GPU that has it: every row of device.RECIPE_RULES, and its edges
    (5, 2): "GeForce GTX 980 (Maxwell)",
    (5, 3): "Jetson TX1 (Tegra X1, Maxwell)",
    (6, 0): "Tesla P100 (Pascal)",
    (6, 1): "GeForce GTX 1080 (Pascal)",
    (6, 2): "Jetson TX2 (Tegra X2, Pascal)",
    (7, 0): "Tesla V100 (Volta)",
    (7, 5): "T4 (Turing)",
    (8, 0): "A100 (Ampere)",
    (8, 6): "RTX 3090 (Ampere)",
    (8, 9): "L4 (Ada)",
    (9, 0): "H100 (Hopper)",
    (10, 0): "B200 (Blackwell)",
    (12, 0): "RTX 5090 (Blackwell)",
}


def _gpus() -> list[tuple[str, tuple[int, int]]]:
    """The GPUs Task 3 asks about: those of :data:`GPU_NAMES` and every capability the rule table lists by name
    (:data:`ampcourse.device.FAST_FP16_WITHOUT_TENSOR_CORES`, the condition of a row of ``RECIPE_RULES``), so
    a capability added to the rule is asked about even before it gets a name here."""
    listed = set(GPU_NAMES) | set(FAST_FP16_WITHOUT_TENSOR_CORES)
    return [(GPU_NAMES.get(c, f"a {generation(c)[0]} GPU"), c) for c in sorted(listed)]


GPUS = _gpus()


def _name(dtype: object) -> str:
    return str(dtype).removeprefix("torch.")


def choose_recipe(fn) -> None:
    """Task 3: ``choose_recipe(capability)`` returns ``(dtype, use_grad_scaler)`` for an NVIDIA GPU, by the
    course's rule (:data:`ampcourse.device.RECIPE_RULES`, which :func:`ampcourse.device.recommend` applies)."""
    task = "Task 3 (choose_recipe)"
    require_callable(task, fn, "choose_recipe")
    answers = collect(task, fn, "choose_recipe", [(capability,) for _, capability in _gpus()])
    for (name, capability), (got, error) in zip(_gpus(), answers, strict=False):  # made after the calls (rev25-r7 E1)
        if error is not None:
            raise error
        want = recommend("cuda", capability)  # after every call (review rev25-r3 E6, as in Task 1)
        rule = next(rule for rule in RECIPE_RULES if rule.holds(capability))
        if not (isinstance(got, tuple) and len(got) == 2 and isinstance(got[0], torch.dtype)
                and exact_bool(got[1]) is not None):  # a numpy bool is one, by its value (review rev25-r8 N3)
            raise fail(task, f"for {capability} you returned {got!r}: return a tuple (torch dtype, bool), e.g. "
                             "`(torch.float32, False)`.")
        dtype, scaler = got[0], exact_bool(got[1])
        where = f"for the {name}, compute capability {capability}"
        recipe = f"({_name(want.dtype)}, {want.use_grad_scaler})"
        if (dtype, scaler) == (want.dtype, want.use_grad_scaler):
            continue
        if dtype not in (torch.float32, torch.float16, torch.bfloat16):
            raise fail(task, f"{where} you chose {_name(dtype)}; choose torch.bfloat16, torch.float16 or "
                             "torch.float32.")
        if capability[0] >= 10 and dtype != want.dtype:
            raise fail(task, f"{where} you chose {_name(dtype)}, but the rule says {recipe}: a two-digit major "
                             "fell through your test. Compare the tuples (`capability >= (8, 0)`): as strings "
                             "'10.0' < '8.0', and a list of known majors misses new GPUs.")
        if dtype == torch.float32 and want.dtype != torch.float32:
            raise fail(task, f"{where} you chose float32 (AMP off), but the rule says {recipe}: {rule.why}.")
        if want.dtype == torch.float32 and dtype != torch.float32:
            fp16 = ("its FP16 arithmetic runs at 2 results per clock per SM against 128 for FP32"
                    if capability == (6, 1) else "it has no FP16 arithmetic units at all")
            bf16 = ", and it has no bfloat16 Tensor Cores (they arrived with Ampere, 8.0)" \
                if dtype == torch.bfloat16 else ""
            raise fail(task, f"{where} you chose {_name(dtype)}, but {fp16}{bf16}: the rule says {recipe}, "
                             f"train in FP32. Below 7.0 only {FAST_FP16_WITHOUT_TENSOR_CORES} run FP16 fast.")
        if dtype == torch.bfloat16 and want.dtype == torch.float16:
            raise fail(task, f"{where} you chose bfloat16, but this GPU has no bfloat16 Tensor Cores (they arrived "
                             "with Ampere, capability 8.0): use float16.")
        if dtype == torch.float16 and want.dtype == torch.bfloat16:
            raise fail(task, f"{where} you chose float16: it works with a scaler, but this GPU runs bfloat16 as "
                             "fast and bfloat16 needs no loss scaling. The course recommends bfloat16 from 8.0 on.")
        if dtype == torch.float16 and not scaler:
            raise fail(task, f"{where}: float16 without a GradScaler lets small gradients flush to zero "
                             "(lesson 02). float16 always needs the scaler.")
        if dtype == torch.bfloat16 and scaler:
            raise fail(task, f"{where}: bfloat16 keeps float32's exponent range, so a GradScaler only costs time "
                             "(and the course does not use one with it).")
        raise fail(task, f"{where}: FP32 training has no float16 gradients to protect, so a GradScaler only "
                         "costs time: return (torch.float32, False).")
    passed(task, f"the course's recipe for {len(GPUS)} GPUs, Maxwell to Blackwell 12.0: float32 where FP16 is "
                 f"slow, float16 + GradScaler on {FAST_FP16_WITHOUT_TENSOR_CORES} and Volta/Turing, bfloat16 "
                 "without a scaler from Ampere on (two-digit majors included).")


# --- tiered hints: shown one tier per failed check, or on request with `check.hint(task)` ---

HINTS = {
    'tensor_bytes': [
        ('Which two numbers does the memory of a tensor depend on? Lesson 00 prints both for a float32 '
         'tensor.'),
        ('One is how many elements the tensor has; the other is how many bytes one element of its dtype '
         'takes. Both are tensor methods.'),
        ('`t.numel()` counts the elements and `t.element_size()` gives bytes per element; multiply them. '
         '(`t.untyped_storage().nbytes()` is wrong for views: a slice shares a bigger storage.)'),
    ],
    'amp_forward': [
        ('Which context manager runs a forward pass in lower precision without touching the weights? '
         'Lesson 00 uses it once.'),
        ("`torch.autocast` needs the device type (`'cpu'` or `'cuda'`) and a dtype; `describe()` holds "
         'both for this machine. A float32 recommendation means AMP off: then autocast must be off too.'),
        ('`rec = hardware.recommendation; with torch.autocast(device_type=hardware.device.type, '
         'dtype=rec.dtype, enabled=rec.dtype != torch.float32): return model(x)`.'),
    ],
    'choose_recipe': [
        ('The rule is printed above the task (`ampcourse.device.recipe_rules()`): which of its rows holds for '
         'a capability, and how do you compare (major, minor) pairs so that 10.0 and 12.0 come out above 8.0?'),
        ('Python compares tuples element by element: `(10, 0) >= (8, 0)` is True, while the strings '
         "'10.0' >= '8.0' is False. Test the rows in order: from (8, 0), from (7, 0), the three fast-FP16 "
         'Pascal/Tegra capabilities, everything else.'),
        ('if capability >= (8, 0): return (torch.bfloat16, False); '
         f'if capability >= (7, 0) or capability in {FAST_FP16_WITHOUT_TENSOR_CORES}: return (torch.float16, '
         'True); return (torch.float32, False).'),
    ],
}
hint = hints(__name__, HINTS)
