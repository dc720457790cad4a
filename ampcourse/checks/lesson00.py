"""Checks for exercise 00 (start here): two small tasks that prove the grading loop end to end."""

from __future__ import annotations

import torch

from ..device import describe
from . import call, fail, hints, passed, require_callable


def tensor_bytes(fn) -> None:
    """Task 1: ``tensor_bytes(t)`` returns how many bytes the elements of ``t`` take."""
    task = "Task 1 (tensor_bytes)"
    require_callable(task, fn, "tensor_bytes")
    cases = [
        torch.zeros(1000, dtype=torch.float32),
        torch.zeros(1000, dtype=torch.bfloat16),
        torch.zeros(3, 5, dtype=torch.float16),
        torch.zeros(2, 2, 2, dtype=torch.float64),
        torch.zeros(7, dtype=torch.float8_e4m3fn),
        torch.zeros(100)[:10],  # a view: its storage holds 100 elements
        torch.zeros(4, 6, dtype=torch.float16)[:, ::2],  # a non-contiguous view
    ]
    for t in cases:
        got = call(task, fn, "tensor_bytes", t)
        want = t.numel() * t.element_size()
        view = " view" if t._base is not None else ""
        shape = f"a {tuple(t.shape)} {str(t.dtype).removeprefix('torch.')} tensor{view}"
        if isinstance(got, torch.Tensor) and got.numel() == 1:
            got = got.item()
        if isinstance(got, bool) or not isinstance(got, (int, float)):
            raise fail(task, f"for {shape} you returned {got!r} ({type(got).__name__}); return a number "
                             "of bytes, e.g. an int.")
        if got == want:
            continue
        if t._base is not None and got == t.untyped_storage().nbytes():
            raise fail(task, f"for {shape} you returned {got}, the size of the whole storage it shares with the "
                             f"tensor it was sliced from. Count only the view's own elements.")
        if got == t.numel():
            raise fail(task, f"for {shape} you returned {got}, the number of elements. Multiply by the "
                             "bytes per element, `t.element_size()`.")
        if got == want * 8:
            raise fail(task, f"for {shape} you returned {got}, which is bits. A byte is 8 bits: use "
                             "`t.element_size()`, which is already in bytes.")
        if got == t.numel() * 4:
            raise fail(task, f"for {shape} you returned {got}: 4 bytes per element, as if it were float32. "
                             f"Each {str(t.dtype).removeprefix('torch.')} element takes {t.element_size()}: "
                             "use `t.element_size()`.")
        raise fail(task, f"for {shape} you returned {got}, expected {want} "
                         f"({t.numel()} elements × {t.element_size()} bytes).")
    passed(task, f"byte counts right for {len(cases)} tensors (float64 down to float8, and views) — "
                 "bfloat16 and float16 take half the bytes of float32.")


def amp_forward(fn) -> None:
    """Task 2: ``amp_forward(model, x)`` runs the forward pass under autocast on the course device."""
    task = "Task 2 (amp_forward)"
    require_callable(task, fn, "amp_forward")
    hardware = describe()
    device, dtype = hardware.device, hardware.recommendation.dtype
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8)).to(device)
    x = torch.randn(16, 64, device=device)
    with torch.no_grad():
        reference = model(x)
    out = call(task, fn, "amp_forward", model, x)
    weight_dtypes = {p.dtype for p in model.parameters()}
    if weight_dtypes != {torch.float32}:
        found = ", ".join(sorted(str(d).removeprefix("torch.") for d in weight_dtypes))
        raise fail(task, f"the model's weights are now {found}: you converted the model (`.half()`, "
                         "`.to(dtype)`). autocast keeps the weights in float32 and casts per operation; "
                         "leave the model as it is and wrap the call in `torch.autocast`.")
    if not isinstance(out, torch.Tensor):
        raise fail(task, f"return the model's output tensor (you returned {type(out).__name__}).")
    want = str(dtype).removeprefix("torch.")
    got = str(out.dtype).removeprefix("torch.")
    if out.dtype == torch.float32:
        raise fail(task, f"the output is float32, so the forward pass did not run under autocast on "
                         f"{device.type}. Wrap it in `with torch.autocast(device_type={device.type!r}, "
                         f"dtype=torch.{want}):` (the device_type must match where the tensors are).")
    if out.dtype != dtype:
        raise fail(task, f"the output is {got}, but the recommended AMP dtype on this {device.type} device "
                         f"is {want}: pass `dtype=torch.{want}` to torch.autocast (see "
                         "`describe().recommendation`).")
    if out.shape != reference.shape:
        raise fail(task, f"the output has shape {tuple(out.shape)}, expected {tuple(reference.shape)}: "
                         "return `model(x)` itself.")
    error = (out.float() - reference).abs().max().item()
    if error > 0.05:
        raise fail(task, f"the output differs from the float32 forward by {error:.3g}, more than {want} "
                         "rounding explains: return `model(x)` computed on the input you were given.")
    passed(task, "the forward pass ran under autocast in the recommended dtype; the weights stayed "
                 "float32 and the output matches float32 to within rounding.")

# --- Task 3: the recipe for other machines --------------------------------------------------------------------

GPUS = [  # (name, compute capability)
    ("Tesla P100 (Pascal)", (6, 0)),
    ("Tesla V100 (Volta)", (7, 0)),
    ("T4 (Turing)", (7, 5)),
    ("A100 (Ampere)", (8, 0)),
    ("RTX 3090 (Ampere)", (8, 6)),
    ("L4 (Ada)", (8, 9)),
    ("H100 (Hopper)", (9, 0)),
]


def choose_recipe(fn) -> None:
    """Task 3: ``choose_recipe(capability)`` returns ``(dtype, use_grad_scaler)`` for an NVIDIA GPU."""
    from ..device import recommend

    task = "Task 3 (choose_recipe)"
    require_callable(task, fn, "choose_recipe")
    for name, capability in GPUS:
        want = recommend("cuda", capability)
        got = call(task, fn, "choose_recipe", capability)
        if not (isinstance(got, tuple) and len(got) == 2 and isinstance(got[0], torch.dtype)
                and isinstance(got[1], bool)):
            raise fail(task, f"for {capability} you returned {got!r}: return a tuple (torch dtype, bool), e.g. "
                             "`(torch.float32, False)`.")
        dtype, scaler = got
        where = f"for the {name}, compute capability {capability}"
        if dtype == torch.float32:
            raise fail(task, f"{where} you chose float32: every GPU here runs autocast in a 16-bit dtype, which at "
                             "least halves activation memory. Choose between bfloat16 and float16.")
        if dtype == torch.bfloat16 and want.dtype == torch.float16:
            raise fail(task, f"{where} you chose bfloat16, but this GPU has no bfloat16 Tensor Cores (they arrived "
                             "with Ampere, capability 8.0): use float16.")
        if dtype == torch.float16 and want.dtype == torch.bfloat16:
            raise fail(task, f"{where} you chose float16: it works with a scaler, but this GPU runs bfloat16 as "
                             "fast and bfloat16 needs no loss scaling. The course recommends bfloat16 from 8.0 on.")
        if dtype != want.dtype:
            raise fail(task, f"{where} you chose {dtype}; choose torch.bfloat16 or torch.float16.")
        if dtype == torch.float16 and not scaler:
            raise fail(task, f"{where}: float16 without a GradScaler lets small gradients flush to zero "
                             "(lesson 02). float16 always needs the scaler.")
        if dtype == torch.bfloat16 and scaler:
            raise fail(task, f"{where}: bfloat16 keeps float32's exponent range, so a GradScaler only costs time "
                             "(and the course does not use one with it).")
    passed(task, f"the right dtype and scaler choice for {len(GPUS)} GPUs, Pascal to Hopper: float16 + GradScaler "
                 "before Ampere, bfloat16 without a scaler from Ampere on.")


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
         'both for this machine.'),
        ('`with torch.autocast(device_type=hardware.device.type, dtype=hardware.recommendation.dtype): '
         'return model(x)`.'),
    ],
    'choose_recipe': [
        ('Two questions per GPU: which 16-bit dtype do its Tensor Cores run fast, and does that dtype need'
         " loss scaling? Lesson 00's hardware report answers both for your machine."),
        ('bfloat16 Tensor Cores arrived with Ampere (capability 8.0); before that, float16 (Tensor Cores '
         "from Volta, 7.0; none on Pascal). float16's narrow range always needs a GradScaler; bfloat16's "
         'does not.'),
        'return (torch.bfloat16, False) if capability >= (8, 0) else (torch.float16, True).',
    ],
}
hint = hints(__name__, HINTS)
