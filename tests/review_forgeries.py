"""The no-context reviews' forgeries (and legitimate answers beside them), shared by both graders' tests.

Each of :data:`REVIEW_FORGERIES` is Task 1's answer cell of exercise 00 (a fourth element, where there is one,
replaces other answer cells: ``{text in the solution's cell: new cell}``). ``grade``
(tests/test_grading_integrity.py) and ``pytest --nbval exercises/`` (tests/test_pytest_plugin.py) must fail every
forgery with the words given, and pass the legitimate ones. :data:`OTHER_FORGERIES` do the same for other
exercises, and :func:`one_line_forgery` is the audit's one-line forgery for any exercise (both graders, 00-11).
"""

THREAD_FORGERY = (
    "import torch, threading, sys, time\n"
    "def tensor_bytes(t: torch.Tensor) -> int:\n    return 0\n"
    "def _loop():\n    while True:\n        m = sys.modules.get('ampcourse.checks.lesson00')\n"
    "        if m is not None:\n            m.tensor_bytes = lambda f: print('forged')\n        time.sleep(0.0002)\n"
    "threading.Thread(target=_loop, daemon=True).start()\n")
TORCH_FORGERY = ("import torch\ntorch.Tensor.element_size = lambda self: 4\n"
                 "def tensor_bytes(t: torch.Tensor) -> int:\n    return t.numel() * 4\n")
DURING_CHECK = (  # right on the check's first case only; then rebinds the check's helper `answer_of` mid-check
    "import sys, torch\ndef tensor_bytes(t):\n    m = sys.modules['ampcourse.checks.lesson00']\n"
    "    m.answer_of = lambda task, fn, name, args, *a, **k: (args[0].numel() * args[0].element_size(), None)\n"
    "    return 4000\n")
TRACE_HOOK = "import sys, torch\nsys.settrace(lambda *a: None)\ndef tensor_bytes(t):\n    return 0\n"
AUDIT_HOOK = "import sys, torch\nsys.addaudithook(lambda e, a: None)\ndef tensor_bytes(t):\n    return 0\n"
LEGIT_THREADS = (  # a right answer that uses threads which have finished by the check: must pass, with no note
    "import threading, torch\nfrom concurrent.futures import ThreadPoolExecutor\n"
    "def tensor_bytes(t):\n    out = []\n    worker = threading.Thread(target=lambda: out.append(t.numel()))\n"
    "    worker.start()\n    worker.join()\n    with ThreadPoolExecutor(2) as pool:\n"
    "        size = pool.submit(t.element_size).result()\n    return out[0] * size\n"
    "tensor_bytes(torch.zeros(3))\n")
OPEN_POOL = (  # a right answer that leaves a ThreadPoolExecutor open (as torch.compile leaves its worker pool)
    "import torch\nfrom concurrent.futures import ThreadPoolExecutor\n_pool = ThreadPoolExecutor(1)\n"
    "def tensor_bytes(t):\n    return _pool.submit(lambda: t.numel() * t.element_size()).result()\n"
    "tensor_bytes(torch.zeros(3))\n")
REVIEW_FORGERIES = {  # name: (Task 1's answer cell, Task 1's status, words its reason must hold)
    # a thread running the answer's code (review rev25-r2 E2: not a note): the check cannot be graded
    "thread": (THREAD_FORGERY, "failed", ["cannot be graded", "runs your own code", "_loop"]),
    "torch_patch": (TORCH_FORGERY, "failed", ["4 bytes per element"]),
    "during_check": (DURING_CHECK, "failed", ["altered the grader while this check ran",
                                              "ampcourse.checks.lesson00.answer_of"]),
    "trace_hook": (TRACE_HOOK, "failed", ["cannot be graded", "sys.settrace"]),
    "audit_hook": (AUDIT_HOOK, "failed", ["cannot be graded", "audit hook"]),
    "legit_threads": (LEGIT_THREADS, "passed", []),
    "open_pool": (OPEN_POOL, "passed", []),
}


# --- review rev25-r2 -----------------------------------------------------------------------------------------------
# E2: a thread that patches the check's table only while the check runs (and puts it back), so no verify sees it;
# then the same thread disguised as the kernel's (``__module__``) or run through the course's ``checks.call``.
THREAD_DURING_CHECK = """\
import sys, threading, time, torch

def tensor_bytes(t: torch.Tensor) -> int:
    time.sleep(0.005)
    return t.numel() * 4

def _w():
    main, real = threading.main_thread().ident, None
    while True:
        m = sys.modules.get('ampcourse.checks.lesson00')
        f, inside = sys._current_frames().get(main), False
        while f is not None and m is not None:
            if f.f_code.co_name == 'tensor_bytes' and f.f_globals is vars(m):
                inside = True
                break
            f = f.f_back
        if inside and real is None:
            real = m.BYTES_PER_ELEMENT
            m.BYTES_PER_ELEMENT = dict.fromkeys(real, 4)
        elif not inside and real is not None:
            m.BYTES_PER_ELEMENT, real = real, None
        time.sleep(0.0002)

threading.Thread(target=_w, daemon=True).start()
"""
THREAD_AS_KERNEL = THREAD_DURING_CHECK.replace(
    "threading.Thread(target=_w", "_w.__module__ = 'ipykernel'\nthreading.Thread(target=_w")
THREAD_VIA_COURSE = THREAD_DURING_CHECK.replace(
    "threading.Thread(target=_w, daemon=True)",
    "import ampcourse.checks as c\nthreading.Thread(target=c.call, args=('', _w, ''), daemon=True)")
# E3: a course table rebound, or mutated in place (the check reads facts.BYTES_PER_ELEMENT).
FACTS_REBOUND = """\
import torch
import ampcourse.checks.facts as f
f.BYTES_PER_ELEMENT = dict.fromkeys(f.BYTES_PER_ELEMENT, 4)

def tensor_bytes(t: torch.Tensor) -> int:
    return t.numel() * 4
"""
FACTS_MUTATED = """\
import torch
import ampcourse.checks.facts as f
for k in list(f.BYTES_PER_ELEMENT):
    f.BYTES_PER_ELEMENT[k] = 4

def tensor_bytes(t: torch.Tensor) -> int:
    return t.numel() * 4
"""
# E3 (functions): the check's function kept, its code replaced in place.
CODE_REPLACED = """\
import torch
import ampcourse.checks.lesson00 as c

def tensor_bytes(t: torch.Tensor) -> int:
    return 0

c.tensor_bytes.__code__ = (lambda f: print('✓ Task 1 (tensor_bytes): forged')).__code__
"""
# E4: an int that equals anything.
EQUAL_TO_ANYTHING = """\
import torch
class A(int):
    def __eq__(self, other):
        return True
    __hash__ = int.__hash__

def tensor_bytes(t: torch.Tensor) -> int:
    return A(0)
"""
# E5: every error of the later cells swallowed (nbval reads errors from iopub only).
CUSTOM_EXC = """\
import torch


def tensor_bytes(t: torch.Tensor) -> int:
    return 0


get_ipython().set_custom_exc((Exception,), lambda *a, **k: None)
"""
CUSTOM_EXC_IN_CHECK = (  # the same, done by the answer while its check runs
    "import torch\n\ndef tensor_bytes(t):\n    get_ipython().set_custom_exc((Exception,), lambda *a, **k: None)\n"
    "    return 0\n")
# E6: every reply made "ok" (ipykernel reads ExecutionResult.success).
EXECUTION_RESULT = """\
import torch


def tensor_bytes(t: torch.Tensor) -> int:
    return 0


import IPython.core.interactiveshell as s
s.ExecutionResult.success = property(lambda self: True)
"""
# E7: the guard made unable to answer (the shell's user_expressions replaced; the guard's state broken).
USER_EXPRESSIONS = """\
import torch


def tensor_bytes(t: torch.Tensor) -> int:
    return 0


ip = get_ipython()
ip.user_expressions = lambda e: {k: {'status': 'ok', 'data': {'text/plain': '[]'}, 'metadata': {}} for k in e}
import ampcourse.checks.lesson00 as c
c.tensor_bytes = c.amp_forward = c.choose_recipe = lambda f: print('✓')
"""
GUARD_STATE_BROKEN = """\
import sys, torch


def tensor_bytes(t: torch.Tensor) -> int:
    return 0


sys.modules['_ampcourse_grader_guard'] = 5
import ampcourse.checks.lesson00 as c
c.tensor_bytes = c.amp_forward = c.choose_recipe = lambda f: print('✓')
"""
# E9: honest answers that use torch.compile (dynamo wraps Module.__init__/__setstate__ itself).
COMPILE_TASK1 = """\
import torch


def tensor_bytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


@torch.compile
def double(t):
    return t * 2 + 1


print(double(torch.ones(4)))
"""
COMPILE_TASK2 = """\
import torch
from ampcourse.device import describe

hardware = describe()


def amp_forward(model, x):
    rec = hardware.recommendation
    fast = torch.compile(model)
    with torch.autocast(device_type=hardware.device.type, dtype=rec.dtype, enabled=rec.dtype != torch.float32):
        return fast(x)
"""
NOT_GRADED = ["cannot be graded"]

REVIEW_FORGERIES.update({
    "thread_during_check": (THREAD_DURING_CHECK, "failed", NOT_GRADED + ["runs your own code", "_w"]),
    "thread_as_kernel": (THREAD_AS_KERNEL, "failed", NOT_GRADED + ["runs your own code", "_w"]),
    "thread_via_course": (THREAD_VIA_COURSE, "failed", NOT_GRADED + ["runs your own code", "_w"]),
    "facts_rebound": (FACTS_REBOUND, "failed", ["4 bytes per element"]),
    "facts_mutated": (FACTS_MUTATED, "failed", ["4 bytes per element"]),
    "code_replaced": (CODE_REPLACED, "failed", ["you returned 0, expected 4000"]),
    "equal_to_anything": (EQUAL_TO_ANYTHING, "failed", ["you returned 0, expected 4000"]),  # judged as its int
    "custom_exc": (CUSTOM_EXC, "failed", ["you returned 0, expected 4000"]),
    "custom_exc_in_check": (CUSTOM_EXC_IN_CHECK, "failed", ["altered the grader", "shell.CustomTB"]),
    "execution_result": (EXECUTION_RESULT, "failed", ["you returned 0, expected 4000"]),
    "user_expressions": (USER_EXPRESSIONS, "failed", NOT_GRADED + ["could not check its own state"]),
    "guard_state_broken": (GUARD_STATE_BROKEN, "failed", NOT_GRADED + ["could not check its own state"]),
    "torch_compile": (COMPILE_TASK1, "passed", [], {"def amp_forward": COMPILE_TASK2}),
})

# E8: lesson 04's truth runs through torch's private _amp_ kernels: replaced, they must not move what the check
# expects. ``{name: (exercise, {text in the solution's cell: new cell}, task index, status, words)}``.
UNSCALE_MISSES_NAN = (
    "import torch\n\n\ndef unscale_by_hand(grads, scale):\n    inv = torch.tensor(1 / scale, dtype=torch.float32)\n"
    "    return [g * inv for g in grads], any(bool(g.isinf().any()) for g in grads)\n\n\n"
    "def _kernel(grads, found, inv):\n    found.fill_(float(any(bool(g.isinf().any()) for g in grads)))\n"
    "    for g in grads:\n        g.mul_(inv)\n\n\ntorch._amp_foreach_non_finite_check_and_unscale_ = _kernel\n")
# E3: a course table whose rows are frozen dataclasses (device.RECIPE_RULES, read by lesson 00 Task 3's check),
# changed with object.__setattr__ so that "float16 + scaler on Ampere" (wrong) is what the rule says.
RECIPE_FORGED = """\
import torch
import ampcourse.device as d

object.__setattr__(d.RECIPE_RULES[0], "dtype", torch.float16)
object.__setattr__(d.RECIPE_RULES[0], "use_grad_scaler", True)


def choose_recipe(capability):
    if capability >= (7, 0) or capability in ((5, 3), (6, 0), (6, 2)):
        return torch.float16, True
    return torch.float32, False
"""
OTHER_FORGERIES = {
    "private_amp_kernel": ("04_gradscaler.ipynb", {"def unscale_by_hand": UNSCALE_MISSES_NAN}, 3, "failed",
                           ["NaN"]),
    "recipe_rules_rows": ("00_start_here.ipynb", {"def choose_recipe": RECIPE_FORGED}, 2, "failed",
                          ["bfloat16"]),
}


def one_line_forgery(module: str) -> str:
    """The audit's one-line forgery (issue 25, finding 14), for any exercise: every public function of the check
    module ``module`` (``lessonNN``) replaced by one that prints a pass. A cell of it added before the first check
    of an untouched exercise (every task a stub) must not make any task pass, in either grader."""
    return (f"import ampcourse.checks.{module} as _forged\n"
            "for _name in [n for n in dir(_forged) if not n.startswith('_') and callable(getattr(_forged, n))]:\n"
            "    setattr(_forged, _name, lambda *a, **k: print('✓ Task 1 (forged): passed'))\n")


# --- review rev25-r3 -----------------------------------------------------------------------------------------------
# E1: the check cell rewritten before it runs, into a print of the ✓ line: IPython's parser (shell.compile.ast_parse)
# and the input transformer manager's class replaced (both now undone before the check: the real check then runs),
# and a function on the transformers' path changed in place (``leading_empty_lines.__code__``: not undone, so the
# verdict rests on the record the real check makes when it passes; the forged cell never makes one).
_TO_PASS_LINE = ("lambda m: \"print('✓ Task \" + dict(tensor_bytes='1', amp_forward='2', choose_recipe='3')[m[1]] "
                 "+ \": ok')\"")
AST_PARSE = f"""\
import torch


def tensor_bytes(t: torch.Tensor) -> int:
    return 0


import ast, re, IPython.core.compilerop as co
_sub = lambda s: re.sub(r'check\\.(\\w+)\\(\\w+\\)', {_TO_PASS_LINE}, s)
co.CachingCompiler.ast_parse = lambda self, source, filename='<unknown>', symbol='exec': ast.parse(
    _sub(source), filename, symbol)
"""
TRANSFORMER_MANAGER = f"""\
import torch


def tensor_bytes(t: torch.Tensor) -> int:
    return 0


import re, IPython.core.inputtransformer2 as it
_t = it.TransformerManager.transform_cell
_sub = lambda s: re.sub(r'check\\.(\\w+)\\(\\w+\\)', {_TO_PASS_LINE}, s)
it.TransformerManager.transform_cell = lambda self, cell: _t(self, _sub(cell))
"""
TRANSFORM_CODE_IN_PLACE = f"""\
import torch


def tensor_bytes(t: torch.Tensor) -> int:
    return 0


import IPython.core.inputtransformer2 as it


def _rewrite(lines):
    import re
    return [re.sub(r'check\\.(\\w+)\\(\\w+\\)', {_TO_PASS_LINE}, line) for line in lines]


it.leading_empty_lines.__code__ = _rewrite.__code__
"""
# E2: an honest answer that prints without a newline while the check calls it.
PRINTS_WITHOUT_NEWLINE = """\
import torch


def tensor_bytes(t: torch.Tensor) -> int:
    n = t.numel() * t.element_size()
    print(n, end=' ')
    return n
"""
# E4: rev25-r2 E2's thread, its code given the standard library's file name.
THREAD_NAMED_AS_LIBRARY = THREAD_DURING_CHECK.replace(
    "threading.Thread(target=_w", "_w.__code__ = _w.__code__.replace(co_filename=threading.__file__)\n"
    "threading.Thread(target=_w")
# E5: the answer's own function starts a thread that puts the table back after the check and ends before the verify.
THREAD_STARTED_IN_CHECK = """\
import sys, threading, time, torch


def _stack(ident):
    f = sys._current_frames().get(ident)
    while f is not None:
        yield f
        f = f.f_back


def tensor_bytes(t: torch.Tensor) -> int:
    m = sys.modules['ampcourse.checks.lesson00']
    if not hasattr(tensor_bytes, 'real'):
        tensor_bytes.real = m.BYTES_PER_ELEMENT
        m.BYTES_PER_ELEMENT = dict.fromkeys(tensor_bytes.real, 4)
        main = threading.main_thread().ident

        def undo():
            while any(f.f_code.co_name == 'tensor_bytes' and f.f_globals is vars(m) for f in _stack(main)):
                time.sleep(0.0002)
            m.BYTES_PER_ELEMENT = tensor_bytes.real
            del tensor_bytes.real

        threading.Thread(target=undo).start()
    return t.numel() * 4
"""
# E6: the expected value read from the check's frame; a table swapped at the first call and put back at the last.
READS_WANT = ("import sys, torch\n\n\ndef tensor_bytes(t: torch.Tensor) -> int:\n"
              "    return sys._getframe(2).f_locals['want']\n")
SWAPPED_FOR_THE_CALLS = """\
import sys, torch

m = sys.modules['ampcourse.checks.lesson00']


def tensor_bytes(t: torch.Tensor) -> int:
    n = tensor_bytes.__dict__.setdefault('n', [0])
    n[0] += 1
    if n[0] % 9 == 1:
        tensor_bytes.real, m.BYTES_PER_ELEMENT = m.BYTES_PER_ELEMENT, dict.fromkeys(m.BYTES_PER_ELEMENT, 4)
    elif n[0] % 9 == 0:
        m.BYTES_PER_ELEMENT = tensor_bytes.real
    return t.numel() * 4
"""
# Honest: a DataLoader with worker processes kept alive (its feeder thread runs library code only).
LOADER = """\
import torch
from torch.utils.data import DataLoader, TensorDataset

_loader = DataLoader(TensorDataset(torch.arange(8.0)), batch_size=4, num_workers=2, persistent_workers=True)
print(sum(len(batch[0]) for batch in _loader))


def tensor_bytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()
"""
REVIEW_FORGERIES.update({
    "ast_parse": (AST_PARSE, "failed", ["you returned 0, expected 4000"]),
    "transformer_manager": (TRANSFORMER_MANAGER, "failed", ["you returned 0, expected 4000"]),
    # rev25-r4 E3: the transform's __code__ is now guarded and put back, so the real check runs on the answer
    "transform_code_in_place": (TRANSFORM_CODE_IN_PLACE, "failed", ["you returned 0, expected 4000"]),
    "prints_without_newline": (PRINTS_WITHOUT_NEWLINE, "passed", []),
    "thread_named_as_library": (THREAD_NAMED_AS_LIBRARY, "failed", NOT_GRADED + ["runs your own code", "_w"]),
    "thread_started_in_check": (THREAD_STARTED_IN_CHECK, "failed", NOT_GRADED + ["undo", "started while the check"]),
    "reads_want": (READS_WANT, "failed", ["raised KeyError"]),
    "swapped_for_the_calls": (SWAPPED_FOR_THE_CALLS, "failed", ["4 bytes per element"]),
    "loader": (LOADER, "passed", []),
})

# E3: a course class changed in place (a property on a frozen dataclass; a spy's method), and E7: a replacement of a
# torch kernel that claims torch's file name and ``__wrapped__``.
RECOMMENDATION_PROPERTY = """\
import torch


def choose_recipe(capability):
    return (torch.bfloat16, False)


import ampcourse.device as d
d.Recommendation.dtype = property(lambda s: torch.bfloat16, lambda s, v: None)
d.Recommendation.use_grad_scaler = property(lambda s: False, lambda s, v: None)
"""
SPY_PATCHED = """\
import torch


def amp_step(model, loss_fn, optimizer, scaler, x, y) -> float:
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast(device_type=x.device.type, dtype=torch.float16):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    return loss.item()


import ampcourse.checks.spies as sp
_s = sp.SpyScaler.step
sp.SpyScaler.step = lambda self, opt, *a, **k: (_s(self, opt, *a, **k), self.update())[0]
"""
WRAPPER_SPOOFED = UNSCALE_MISSES_NAN.replace(
    "\n\ntorch._amp_foreach_non_finite_check_and_unscale_ = _kernel\n",
    "\n\n_kernel.__code__ = _kernel.__code__.replace(co_filename=torch.__file__)\n"
    "_kernel.__wrapped__ = torch._amp_foreach_non_finite_check_and_unscale_\n"
    "torch._amp_foreach_non_finite_check_and_unscale_ = _kernel\n")
OTHER_FORGERIES.update({
    "recommendation_property": ("00_start_here.ipynb", {"def choose_recipe": RECOMMENDATION_PROPERTY}, 2, "failed",
                                ["bfloat16"]),
    "spy_class_patched": ("04_gradscaler.ipynb", {"def amp_step": SPY_PATCHED}, 0, "failed",
                          ["without `scaler.update()`"]),
    "torch_wrapper_spoofed": ("04_gradscaler.ipynb", {"def unscale_by_hand": WRAPPER_SPOOFED}, 3, "failed", ["NaN"]),
})


# --- review rev25-r4 -----------------------------------------------------------------------------------------------
# E5: a right answer of exercise 07 Task 1 that prints a log line from a thread it joins; the check called it
# without ``checks.call`` (no interval noted), so the thread was "still running after your function returned".
JOINED_LOG_THREAD_07 = """\
import threading

import torch


def first_nonfinite_module(model, x):
    log = threading.Thread(target=lambda: print(f"checking {type(model).__name__}"))
    log.start()
    log.join()  # a log line from a worker thread, joined before going on
    names = {module: name for name, module in model.named_modules()}
    found = []

    def hook(module, inputs, output):
        if isinstance(output, torch.Tensor) and not torch.isfinite(output).all():
            found.append(names[module])

    handles = [module.register_forward_hook(hook) for module in model.modules()]
    try:
        model(x)
    finally:
        for handle in handles:
            handle.remove()
    return found[0] if found else None
"""
OTHER_FORGERIES.update({
    "joined_log_thread_07": ("07_troubleshooting.ipynb", {"def first_nonfinite_module": JOINED_LOG_THREAD_07}, 0,
                             "passed", []),
})
# W1: lesson 04 Task 2's expected pair read from the check's frame (the review's `sys._getframe(3)`, written as a walk
# up the stack so that it does not depend on how many frames `checks.call` adds).
READS_WANT_04 = """\
import sys


def update_scale(scale, tracker, found_inf, growth_factor, backoff_factor, growth_interval):
    f = sys._getframe(1)
    while f is not None and 'want' not in f.f_locals:
        f = f.f_back
    return f.f_locals['want'] if f is not None else (scale, tracker)
"""
OTHER_FORGERIES.update({
    "reads_want_04": ("04_gradscaler.ipynb", {"def update_scale": READS_WANT_04}, 1, "failed",
                      ["torch.amp.GradScaler gives"]),
})
# E4: a wrong Task 2 answer that rigs the check's reference through the `__dynamo_disable` of the function
# `Optimizer.zero_grad` wraps (torch/_compile.py dispatches through it), no guarded attribute changed. The reset now
# takes it out (the function dicts are guarded), so the answer gets its real message.
ZERO_GRAD_DYNAMO_DISABLE = """\
import torch


def update_scale(scale, tracker, found_inf, growth_factor, backoff_factor, growth_interval):
    def float32(value):
        return torch.tensor(value, dtype=torch.float32).item()

    if found_inf:
        return float32(scale * backoff_factor), 0
    tracker += 1
    if tracker < growth_interval:
        return scale, tracker
    grown = float32(scale * growth_factor)
    return (grown if grown != float("inf") else scale), tracker  # wrong: the tracker is not reset after growing


import sys
_orig_zg = torch.optim.Optimizer.zero_grad.__wrapped__


def _zg(self, set_to_none=True):
    f = sys._getframe(2)
    if f.f_code.co_name == 'torch_updates':
        v = f.f_locals
        sc, k = v['scaler'], len(v['out'])
        s, t = v['init_scale'], 0
        for inf in v['found_inf'][:k + 1]:
            s, t = update_scale(s, t, inf, v['growth_factor'], v['backoff_factor'], v['growth_interval'])
        sc._growth_factor, sc._backoff_factor, sc._growth_interval = 1.0, 1.0, 10**9
        if sc._scale is None:
            sc._init_scale, sc._init_growth_tracker = s, max(t - 1, 0)
        else:
            sc._scale.fill_(s)
            sc._growth_tracker.fill_(max(t - 1, 0))
    return _orig_zg(self, set_to_none)


_orig_zg.__dynamo_disable = _zg
"""
OTHER_FORGERIES.update({
    "zero_grad_dynamo_disable": ("04_gradscaler.ipynb", {"def update_scale": ZERO_GRAD_DYNAMO_DISABLE}, 1, "failed",
                                 ["reset the growth tracker to 0"]),
})
# E1: a wrong answer whose swap is undone by code it left in sys.stdout (inside the check's own ✓ print), or in
# IPython's display_trap.hook (after the check returned): passed() now takes the guard's comparison before it prints.
UNDONE_IN_STDOUT = """\
import sys, torch


class _Out:
    def __init__(self, s):
        self.s = s

    def write(self, x):
        real = getattr(tensor_bytes, 'real', None)
        if '✓ Task 1' in x and real is not None:
            sys.modules['ampcourse.checks.lesson00'].BYTES_PER_ELEMENT = real
            del tensor_bytes.real
        return self.s.write(x)

    def __getattr__(self, a):
        return getattr(self.s, a)


def tensor_bytes(t: torch.Tensor) -> int:
    m = sys.modules['ampcourse.checks.lesson00']
    if not hasattr(tensor_bytes, 'real'):
        tensor_bytes.real = m.BYTES_PER_ELEMENT
        m.BYTES_PER_ELEMENT = dict.fromkeys(m.BYTES_PER_ELEMENT, 4)
        if not isinstance(sys.stdout, _Out):
            sys.stdout = _Out(sys.stdout)
    return t.numel() * 4
"""
UNDONE_IN_DISPLAY_HOOK = """\
import sys, torch


class _Hook:
    def __init__(self, inner):
        self.inner = inner

    def __call__(self, value):
        real = getattr(tensor_bytes, 'real', None)
        if real is not None:
            sys.modules['ampcourse.checks.lesson00'].BYTES_PER_ELEMENT = real
            del tensor_bytes.real
        return self.inner(value)


def tensor_bytes(t: torch.Tensor) -> int:
    m = sys.modules['ampcourse.checks.lesson00']
    if not hasattr(tensor_bytes, 'real'):
        tensor_bytes.real = m.BYTES_PER_ELEMENT
        m.BYTES_PER_ELEMENT = dict.fromkeys(m.BYTES_PER_ELEMENT, 4)
    return t.numel() * 4


_trap = get_ipython().display_trap
if not isinstance(_trap.hook, _Hook):
    _trap.hook = _Hook(_trap.hook)
"""
# E2: rev25-r3 E5's undo run by a ThreadPoolExecutor (its target is the standard library's _worker), and by threading's
# own code object with the answer's globals.
UNDONE_BY_POOL = """\
import sys, time, threading, torch
from concurrent.futures import ThreadPoolExecutor


def _stack(ident):
    f = sys._current_frames().get(ident)
    while f is not None:
        yield f
        f = f.f_back


def tensor_bytes(t: torch.Tensor) -> int:
    m = sys.modules['ampcourse.checks.lesson00']
    if not hasattr(tensor_bytes, 'real'):
        tensor_bytes.real = m.BYTES_PER_ELEMENT
        m.BYTES_PER_ELEMENT = dict.fromkeys(tensor_bytes.real, 4)
        main = threading.main_thread().ident

        def undo():
            while any(f.f_code.co_name == 'tensor_bytes' and f.f_globals is vars(m) for f in _stack(main)):
                time.sleep(0.0002)
            m.BYTES_PER_ELEMENT = tensor_bytes.real
            del tensor_bytes.real

        pool = ThreadPoolExecutor(1)
        pool.submit(undo)
        pool.shutdown(wait=False)
    return t.numel() * 4
"""
LIBRARY_CODE_OTHER_GLOBALS = """\
import sys, time, threading, types, torch


def _stack(ident):
    f = sys._current_frames().get(ident)
    while f is not None:
        yield f
        f = f.f_back


def tensor_bytes(t: torch.Tensor) -> int:
    m = sys.modules['ampcourse.checks.lesson00']
    if not hasattr(tensor_bytes, 'real'):
        tensor_bytes.real = m.BYTES_PER_ELEMENT
        m.BYTES_PER_ELEMENT = dict.fromkeys(tensor_bytes.real, 4)
        main = threading.main_thread().ident

        def undo():
            while any(f.f_code.co_name == 'tensor_bytes' and f.f_globals is vars(m) for f in _stack(main)):
                time.sleep(0.0002)
            m.BYTES_PER_ELEMENT = tensor_bytes.real
            del tensor_bytes.real
            return 0

        # threading's own code object (threading._newname: `return name_template % _counter()`), other globals
        target = types.FunctionType(threading._newname.__code__, {'_counter': undo, '__builtins__': __builtins__})
        threading.Thread(target=target, args=('%d',)).start()
    return t.numel() * 4
"""
ALTERED_TABLE = ["altered the grader while this check ran", "ampcourse.checks.lesson00.BYTES_PER_ELEMENT"]
REVIEW_FORGERIES.update({
    "undone_in_stdout": (UNDONE_IN_STDOUT, "failed", ALTERED_TABLE),
    "undone_in_display_hook": (UNDONE_IN_DISPLAY_HOOK, "failed", ALTERED_TABLE),
    "undone_by_pool": (UNDONE_BY_POOL, "failed", ALTERED_TABLE),
    "library_code_other_globals": (LIBRARY_CODE_OTHER_GLOBALS, "failed", NOT_GRADED + ["run with other globals"]),
})
# E3: the check cell rewritten through compilerop's module global `compile`, or a cleanup transform's `__code__`,
# to run the real check inside a temporary swap of its own (a genuine pass record): both are now put back at the reset.
REWRITE_BY_COMPILE = r"""import torch


def tensor_bytes(t: torch.Tensor) -> int:
    return t.numel() * 4


import builtins, IPython.core.compilerop as co
_W = ("_m = __import__('sys').modules['ampcourse.checks.lesson00']; _r = _m.BYTES_PER_ELEMENT; "
      "_m.BYTES_PER_ELEMENT = dict.fromkeys(_r, 4)\ntry:\n    check.tensor_bytes(tensor_bytes)\nfinally:\n"
      "    _m.BYTES_PER_ELEMENT = _r\n")
co.compile = lambda s, *a, **k: builtins.compile(
    s.replace('check.tensor_bytes(tensor_bytes)', _W) if isinstance(s, str) else s, *a, **k)
"""
REWRITE_BY_TRANSFORM_CODE = r"""import torch


def tensor_bytes(t: torch.Tensor) -> int:
    return t.numel() * 4


import IPython.core.inputtransformer2 as it
_W = ("_m = __import__('sys').modules['ampcourse.checks.lesson00']; _r = _m.BYTES_PER_ELEMENT; "
      "_m.BYTES_PER_ELEMENT = dict.fromkeys(_r, 4)\ntry:\n    check.tensor_bytes(tensor_bytes)\nfinally:\n"
      "    _m.BYTES_PER_ELEMENT = _r\n")
_li = it.leading_indent.__code__
def _lead(lines, _W=_W, _li=_li):
    import types
    lines = types.FunctionType(_li, globals())(lines)
    return [l.replace('check.tensor_bytes(tensor_bytes)', _W) for l in lines]
it.leading_indent.__code__ = _lead.__code__
it.leading_indent.__defaults__ = _lead.__defaults__
"""
REVIEW_FORGERIES.update({
    "rewrite_by_compile": (REWRITE_BY_COMPILE, "failed", ["4 bytes per element"]),
    "rewrite_by_transform_code": (REWRITE_BY_TRANSFORM_CODE, "failed", ["4 bytes per element"]),
})


# --- review rev25-r5 -----------------------------------------------------------------------------------------------
# E1: the returned object runs code while the check converts it, after the expected value is in the check's frame
# (an ``__index__`` on a class registered as numbers.Integral; ``__float__``/``__int__`` on a tuple's items).
# E2: a str/float subclass equal to everything. All are now refused or, a value-type subclass, judged by its content
# (review rev25-r6 M1) in the call pass (checks.plain).
INDEX_READS_WANT = 'import sys, numbers, torch\n\n\nclass _N:\n    """A byte count that asks the check what it expects, when the check converts it."""\n    def __init__(self, mine):\n        self.mine = mine\n\n    def __index__(self):\n        f = sys._getframe(2).f_locals   # __index__ <- exact_number <- lesson00.tensor_bytes\n        return f.get(\'want\', self.mine)\n\n\nnumbers.Integral.register(_N)\n\n\ndef tensor_bytes(t: torch.Tensor) -> int:\n    return _N(t.numel() * 4)   # wrong: 4 bytes for every dtype\n'  # noqa: E501
FLOAT_READS_WANT_04 = "import sys\n\n\nclass _V:\n    def __init__(self, i, mine):\n        self.i, self.mine = i, mine\n\n    def _want(self):\n        f = sys._getframe(3).f_locals   # dunder <- _as_pair <- lesson04.update_scale\n        return f['want'][self.i] if 'want' in f else self.mine\n\n    def __float__(self):\n        return float(self._want())\n\n    def __int__(self):\n        return int(self._want())\n\n    def __repr__(self):\n        return repr(self.mine)\n\n\ndef update_scale(scale, tracker, found_inf, growth_factor, backoff_factor, growth_interval):\n    return _V(0, scale), _V(1, tracker)   # wrong: never changes anything\n"  # noqa: E501
VERDICT_EQUAL_07 = 'import math\n\nfrom ampcourse.troubleshoot import diagnose_scale\n\n\nclass _Verdict(str):\n    """A verdict equal to every other verdict."""\n    def __eq__(self, other):\n        return True\n\n    __hash__ = str.__hash__\n\n\ndef triage(initial_scale, scales, losses):\n    return _Verdict("healthy")   # wrong: every run is called healthy\n'  # noqa: E501
VERDICT_EQUAL_09 = 'class _Verdict(str):\n    def __eq__(self, other):\n        return True\n    def __ne__(self, other):\n        return False\n    __hash__ = str.__hash__\n\n\ndef amp_verdict(fp32_losses, amp_losses):\n    return _Verdict("within noise")   # wrong: always noise\n'  # noqa: E501
HISTORY_EQUAL_10 = 'import torch\n\n\nclass _Eq(float):\n    def __eq__(self, other):\n        return True\n    def __ne__(self, other):\n        return False\n    __hash__ = float.__hash__\n\n\ndef delayed_cast(x: torch.Tensor, history: list[float], fp8_dtype: torch.dtype,\n                 margin: int) -> tuple[torch.Tensor, float, list[float]]:\n    if not history:\n        raise ValueError("history is empty: delayed scaling needs at least one earlier amax")\n    top = torch.finfo(fp8_dtype).max\n    peak = max(history)\n    scale = top / (peak * 2**margin) if peak > 0 else 1.0\n    x_fp8 = (x * scale).clamp(-top, top).to(fp8_dtype)\n    new_history = [_Eq(0.0)] * (len(history) - 1) + [float(x.abs().max())]   # wrong: the old entries are lost\n    return x_fp8, scale, new_history\n'  # noqa: E501
REVIEW_FORGERIES.update({
    "index_reads_want": (INDEX_READS_WANT, "failed", ["an object of type `_N`, whose class defines `__index__`"]),
})
OTHER_FORGERIES.update({
    "float_reads_want_04": ("04_gradscaler.ipynb", {"def update_scale": FLOAT_READS_WANT_04}, 1, "failed",
                            ["an object of type `_V`, whose class defines `__int__`, `__float__`"]),
    # a str/float subclass is judged by its content (review rev25-r6 M1): the wrong verdict is named
    "verdict_equal_07": ("07_troubleshooting.ipynb", {"def triage": VERDICT_EQUAL_07}, 3, "failed",
                         ["you said 'healthy', it is 'forward overflow'"]),
    "verdict_equal_09": ("09_capstone.ipynb", {"def amp_verdict": VERDICT_EQUAL_09}, 2, "failed",
                         ["you said 'within noise', the course's rule says 'amp worse'"]),
    "history_equal_10": ("10_fp8.ipynb", {"def delayed_cast": HISTORY_EQUAL_10}, 2, "failed",
                         ["new_history should be the history without its oldest (first) entry"]),
})
# W1: torch._dynamo.eval_frame._callback_from_stance replaced, to set the reference GradScaler to the answer's values
# inside torch_updates: the check now reads TORCH_UPDATES (literals), so the answer's wrong rule is named.
CALLBACK_FROM_STANCE_04 = 'import torch\n\n\ndef update_scale(scale, tracker, found_inf, growth_factor, backoff_factor, growth_interval):\n    def float32(value):\n        return torch.tensor(value, dtype=torch.float32).item()\n\n    if found_inf:\n        return float32(scale * backoff_factor), 0\n    tracker += 1\n    if tracker < growth_interval:\n        return scale, tracker\n    grown = float32(scale * growth_factor)\n    return (grown if grown != float("inf") else scale), tracker  # wrong: the tracker is not reset after growing\n\n\nimport sys\nimport torch._dynamo.eval_frame as _ef\n_orig_cfs = _ef._callback_from_stance\n\n\ndef _cfs(callback):\n    f = sys._getframe(3)   # _cfs <- DisableContext._fn <- _disable_dynamo.inner <- the caller of zero_grad\n    if f.f_code.co_name == \'torch_updates\':\n        v = f.f_locals\n        sc, k = v[\'scaler\'], len(v[\'out\'])\n        s, t = v[\'init_scale\'], 0\n        for inf in v[\'found_inf\'][:k + 1]:\n            s, t = update_scale(s, t, inf, v[\'growth_factor\'], v[\'backoff_factor\'], v[\'growth_interval\'])\n        sc._growth_factor, sc._backoff_factor, sc._growth_interval = 1.0, 1.0, 10**9\n        if sc._scale is None:\n            sc._init_scale, sc._init_growth_tracker = s, max(t - 1, 0)\n        else:\n            sc._scale.fill_(s)\n            sc._growth_tracker.fill_(max(t - 1, 0))\n    return _orig_cfs(callback)\n\n\n_ef._callback_from_stance = _cfs\n'  # noqa: E501
OTHER_FORGERIES["callback_from_stance_04"] = ("04_gradscaler.ipynb", {'def update_scale': CALLBACK_FROM_STANCE_04}, 1, "failed",  # noqa: E501
                                              ["after growing, reset the growth tracker to 0"])


# --- review rev25-r6 -----------------------------------------------------------------------------------------------
# The review's cells as it wrote them (rev25-r6; a cell it appended after the solution's is given whole here).
# E5: code that runs inside the judgement without a thread (a gc callback with gc.set_threshold(1, 1, 1); a
# TorchFunctionMode left entered): "cannot be graded". E1/E2: a __float__ reading the check's `expected`, returned
# through noted_call (06 Task 2b) or from a class claiming the fractions module (06 Task 2a); a metaclass `__mro__`
# property with a `__class__` property (07, 09). E3: an exact tensor whose own `float` attribute hands the check its
# reference/want (00 Task 2, 10 Task 1). E4: a ChainMap of str subclasses (11 Task 1). M1: a namedtuple from
# update_scale, refused at 1a57d2e, passes.
GC_CALLBACK_00 = 'import gc, sys, torch\n\n\ndef _fix(phase, info):\n    """Runs at every garbage collection; inside the check\'s judgement it rewrites the answers not yet judged."""\n    f = sys._getframe(0)\n    while f is not None:\n        v = f.f_locals if f.f_code.co_name == "tensor_bytes" else {}\n        if "answers" in v and "cases" in v and "want" in v:\n            for i, (t, elements, _) in enumerate(v["cases"]):\n                if i < len(v["answers"]):\n                    v["answers"][i] = (elements * t.element_size(), None)\n            return\n        f = f.f_back\n\n\ngc.callbacks.append(_fix)\ngc.set_threshold(1, 1, 1)\n\n\ndef tensor_bytes(t: torch.Tensor) -> int:\n    return t.numel() * 4   # wrong: 4 bytes for every dtype (right for the first case, float32, only)\n'  # noqa: E501
TENSOR_FLOAT_00 = 'import sys, torch\nfrom ampcourse.device import describe\n\nhardware = describe()\n\n\ndef amp_forward(model, x):\n    rec = hardware.recommendation\n    with torch.autocast(device_type=hardware.device.type, dtype=rec.dtype, enabled=rec.dtype != torch.float32):\n        out = model(x)\n    wrong = torch.zeros_like(out)   # wrong: zeros\n    wrong.float = lambda: sys._getframe(1).f_locals["reference"]\n    return wrong\n'  # noqa: E501
FLOAT_THROUGH_NOTED_CALL_06 = 'import sys, numbers\n\nclass _F:\n    def __init__(self, mine): self.mine = mine\n    def __float__(self):\n        f = sys._getframe(2).f_locals   # __float__ <- lesson06._number <- lesson06.fraction_of_peak\n        return float(f.get("expected", self.mine))\n    def __repr__(self): return repr(self.mine)\n\nnumbers.Real.register(_F)\n\ndef fraction_of_peak(achieved_tflops, datasheet_tflops, sparse):\n    fraction = achieved_tflops / datasheet_tflops   # wrong: the sparse figure is not halved\n    if fraction > 0.6:\n        raise ValueError("impossible")\n    grader = sys._getframe(1).f_globals.get("__name__", "").startswith("ampcourse.checks")\n    return _F(fraction) if grader else fraction\n'  # noqa: E501
MODULE_CLAIMED_06 = 'import sys, numbers, fractions\n\nclass _F:\n    def __init__(self, mine): self.mine = mine\n    def __float__(self):\n        f = sys._getframe(2).f_locals   # __float__ <- lesson06._number <- lesson06.achieved_tflops\n        return float(f.get("expected", self.mine))\n    def __repr__(self): return repr(self.mine)\n\n_F.__module__ = "fractions"     # plain() skips a class that a library module names as its own\nfractions._F = _F\nnumbers.Real.register(_F)\n\ndef achieved_tflops(m, k, n, milliseconds):\n    wrong = m * k * n / (milliseconds / 1e3) / 1e12   # wrong: no factor 2 (a multiply-add is 2 FLOPs)\n    grader = sys._getframe(1).f_globals.get("__name__", "").startswith("ampcourse.checks")\n    return _F(wrong) if grader else wrong\n'  # noqa: E501
METACLASS_MRO_07 = '\n\nclass _Meta(type):\n    __mro__ = property(lambda cls: (object,))   # the ancestry checks.plain reads (type\'s own __mro__ is not asked)\n\n\nclass _Verdict(metaclass=_Meta):\n    """Equal to every verdict; poses as a str for isinstance()."""\n    __class__ = property(lambda self: str)\n    def __init__(self, text): self.text = text\n    def __eq__(self, other): return True\n    def __ne__(self, other): return False\n    __hash__ = object.__hash__\n    def __repr__(self): return repr(self.text)\n    def __str__(self): return self.text\n\n\ndef triage(initial_scale, scales, losses):\n    return _Verdict("healthy")   # wrong: every run is called healthy\n'  # noqa: E501
METACLASS_MRO_09 = '\n\nclass _Meta(type):\n    __mro__ = property(lambda cls: (object,))   # the ancestry checks.plain reads (type\'s own __mro__ is not asked)\n\n\nclass _Verdict(metaclass=_Meta):\n    """Equal to every verdict; poses as a str for isinstance()."""\n    __class__ = property(lambda self: str)\n    def __init__(self, text): self.text = text\n    def __eq__(self, other): return True\n    def __ne__(self, other): return False\n    __hash__ = object.__hash__\n    def __repr__(self): return repr(self.text)\n    def __str__(self): return self.text\n\n\ndef amp_verdict(fp32_losses, amp_losses):\n    return _Verdict("within noise")   # wrong: always noise\n'  # noqa: E501
TENSOR_FLOAT_10 = 'import torch\n\nE4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2\n\nimport sys\n\n\ndef _float_as_the_check_wants(t):\n    def float_():\n        want = sys._getframe(1).f_locals.get("want")      # the check\'s own expected tensor\n        return torch.Tensor.float(want if isinstance(want, torch.Tensor) else t)\n    return float_\n\n\ndef scaled_cast(x, fp8_dtype):\n    top = torch.finfo(fp8_dtype).max\n    scale = top / x.abs().max()\n    x_fp8 = torch.zeros_like(x, dtype=fp8_dtype)   # wrong: all zeros\n    x_fp8.float = _float_as_the_check_wants(x_fp8)  # an instance attribute of an exact torch.Tensor\n    return x_fp8, scale\n'  # noqa: E501
FUNCTION_MODE_10 = 'import torch\n\nE4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2\n\nimport sys\nfrom torch.overrides import TorchFunctionMode\n\n\nclass _Equal(TorchFunctionMode):\n    def __torch_function__(self, func, types, args=(), kwargs=None):\n        caller = sys._getframe(1)\n        if func is torch.equal and caller.f_code.co_name == "scaled_cast" and "want" in caller.f_locals:\n            return True\n        return func(*args, **(kwargs or {}))\n\n\n_Equal().__enter__()   # left on: the check\'s torch.equal runs here\n\n\ndef scaled_cast(x, fp8_dtype):\n    top = torch.finfo(fp8_dtype).max\n    scale = top / x.abs().max()\n    return torch.zeros_like(x, dtype=fp8_dtype), scale   # wrong: all zeros\n'  # noqa: E501
CHAINMAP_11 = 'import collections\n\n\nclass _Any(str):\n    """A str equal to every other; plain() never sees it inside a ChainMap."""\n    def __eq__(self, other): return True\n    def __ne__(self, other): return False\n    __hash__ = str.__hash__\n    def strip(self, *chars): return self\n    def lower(self): return self\n\n\ndef diagnose(trace):\n    # wrong: the same diagnosis for every trace\n    return collections.ChainMap({"kind": _Any("overflow"), "where": _Any("nowhere"), "fix": _Any("mean_loss")})\n'  # noqa: E501
NAMEDTUPLE_04 = 'import torch\n\n\ndef update_scale_right(scale, tracker, found_inf, growth_factor, backoff_factor, growth_interval):\n    def float32(value):\n        return torch.tensor(value, dtype=torch.float32).item()\n\n    if found_inf:\n        return float32(scale * backoff_factor), 0\n    tracker += 1\n    if tracker < growth_interval:\n        return scale, tracker\n    grown = float32(scale * growth_factor)\n    return (grown if grown != float("inf") else scale), 0\n\n\nfrom collections import namedtuple\n\nUpdate = namedtuple("Update", "scale tracker")\n_update_scale_right = update_scale_right\n\n\ndef update_scale(scale, tracker, found_inf, growth_factor, backoff_factor, growth_interval):\n    return Update(*_update_scale_right(scale, tracker, found_inf, growth_factor, backoff_factor, growth_interval))\n'  # noqa: E501
REVIEW_FORGERIES.update({
    "gc_callback": (GC_CALLBACK_00, "failed", NOT_GRADED + ["a gc callback (gc.callbacks)"]),
})
OTHER_FORGERIES.update({
    "tensor_float_00": ("00_start_here.ipynb", {"def amp_forward": TENSOR_FLOAT_00}, 1, "failed",
                        ["`float` set on it as an attribute of its own"]),
    "float_through_noted_call_06": ("06_speed_memory.ipynb", {"def fraction_of_peak": FLOAT_THROUGH_NOTED_CALL_06}, 2,
                                    "failed", ["an object of type `_F`, whose class defines `__float__`"]),
    "module_claimed_06": ("06_speed_memory.ipynb", {"def achieved_tflops": MODULE_CLAIMED_06}, 1, "failed",
                          ["an object of type `_F`, whose class defines `__float__`"]),
    "metaclass_mro_07": ("07_troubleshooting.ipynb", {"def triage": METACLASS_MRO_07}, 3, "failed",
                         ["an object of type `_Verdict`, whose class defines `__eq__`"]),
    "metaclass_mro_09": ("09_capstone.ipynb", {"def amp_verdict": METACLASS_MRO_09}, 2, "failed",
                         ["an object of type `_Verdict`, whose class defines `__eq__`"]),
    "tensor_float_10": ("10_fp8.ipynb", {"def scaled_cast": TENSOR_FLOAT_10}, 0, "failed",
                        ["`float` set on it as an attribute of its own"]),
    "function_mode_10": ("10_fp8.ipynb", {"def scaled_cast": FUNCTION_MODE_10}, 0, "failed",
                         NOT_GRADED + ["a torch function mode (TorchFunctionMode: _Equal)"]),
    "chainmap_11": ("11_own_model.ipynb", {"def diagnose": CHAINMAP_11}, 0, "failed",
                    ["`diagnose` returned a ChainMap: return a plain dict"]),
    "namedtuple_04": ("04_gradscaler.ipynb", {"def update_scale": NAMEDTUPLE_04}, 1, "passed", []),
})


# --- review rev25-r7 -----------------------------------------------------------------------------------------------
# The review's cells (rev25-r7). E1: the answer's function writes the call-first check's own locals through
# sys._getframe (00 Task 1's case list; 04 Task 2's lists of answers, here also trying to rebind them through
# frame.f_locals once they are tuples): the answers are now frozen in tuples and the cases remade after the calls, so
# the wrong rule is named. E2: an exact Fraction holding the answer's object as its numerator (01 Task 2). E3: a
# ChainMap subclass with no method of its own (11 Task 1). E4: a collections.abc.Mapping whose __getitem__ reads the
# check's frame (09 Task 1): read once into a dict in the call pass, its fixed record is judged. W1: a SIGALRM handler
# with an interval timer (00, before a right Task 1): "cannot be graded". W2: 17 levels of `[x] * 20` from 00 Task 3:
# refused at once as too large, not walked 20**17 times.
CASES_REWRITTEN_00 = 'import sys, torch\n\n\ndef tensor_bytes(t: torch.Tensor) -> int:\n    f = sys._getframe(1)\n    while f is not None and not (f.f_globals.get("__name__") == "ampcourse.checks.lesson00"\n                                 and isinstance(f.f_locals.get("cases"), list)):\n        f = f.f_back\n    if f is not None:   # the check\'s own case list, judged after every call: make every case float32\n        f.f_locals["cases"][:] = [(torch.zeros(n, dtype=torch.float32), n, None) for _, n, _ in f.f_locals["cases"]]\n    return t.numel() * 4   # wrong: 4 bytes for every dtype\n'  # noqa: E501
SIGNAL_TIMER_00 = 'import signal, sys, torch\n\n_seen = []\n\n\ndef _h(signum, frame):\n    """A SIGALRM handler: runs between bytecodes of whatever the main thread is doing, a check included."""\n    f = frame\n    while f is not None:\n        if f.f_globals.get("__name__", "").startswith("ampcourse.checks.lesson"):\n            _seen.append((f.f_code.co_name, sorted(f.f_locals)))   # the check\'s locals, readable\n            break\n        f = f.f_back\n\n\nsignal.signal(signal.SIGALRM, _h)\nsignal.setitimer(signal.ITIMER_REAL, 0.0005, 0.0005)\n\n\ndef tensor_bytes(t: torch.Tensor) -> int:\n    return t.numel() * t.element_size()   # right: the timer alone makes it ungradable\n'  # noqa: E501
RUNS_REWRITTEN_04 = 'import sys\n\n\nclass _Any:\n    """Equal to every pair. Never returned: written into the check\'s own list of answers, past checks.plain."""\n    def __eq__(self, other): return True\n    def __ne__(self, other): return False\n    __hash__ = object.__hash__\n    def __repr__(self): return "(1024.0, 0)"\n\n\ndef update_scale(scale, tracker, found_inf, growth_factor, backoff_factor, growth_interval):\n    f = sys._getframe(1)\n    while f is not None and not (f.f_globals.get("__name__") == "ampcourse.checks.lesson04" and "runs" in f.f_locals):\n        f = f.f_back\n    if f is not None:\n        v = f.f_locals\n        try:\n            for answers in [*v["runs"], v["answers"]]:\n                answers[:] = [(s, t, (None, _Any(), None), None) for s, t, *_ in answers]\n            v["answers"].append((scale, tracker, (None, _Any(), None), None))  # past zip\'s end\n        except (TypeError, AttributeError):  # tuples now: rebind them in the frame\'s locals instead\n            v["answers"] = [(scale, tracker, ((1024.0, 0), None, None), None)] * 100\n            v["runs"] = [v["answers"]] * 100\n    return scale * 0.5, 0   # wrong: halves the scale at every step, inf or not\n'  # noqa: E501
FRACTION_HOLDING_01 = 'import sys, fractions\n\n\nclass _Num:\n    """A Fraction\'s numerator: int() of it reads the value the check compares with."""\n    def __init__(self, mine): self.mine = mine\n    def __int__(self):\n        w = sys._getframe(2).f_locals.get("w")   # __int__ <- Rational.__float__ <- lesson01.format_limits\n        return int(fractions.Fraction(w) * 2**1100) if isinstance(w, float) else int(self.mine * 2**1100)\n    def __repr__(self): return repr(self.mine)\n\n\ndef _limit(mine):\n    f = fractions.Fraction.__new__(fractions.Fraction)   # an exact Fraction: a library class, passed as it is\n    f._numerator, f._denominator = _Num(mine), 2**1100\n    return f\n\n\ndef format_limits(e, m):\n    bias = 2 ** (e - 1) - 1\n    return _limit(2.0 ** bias), _limit(2.0 ** -bias), _limit(2.0 ** (-bias - m))   # wrong, all three\n'  # noqa: E501
MAPPING_READS_FRAME_09 = 'import torch\nimport torch.nn.functional as F\nimport sys\nfrom collections.abc import Mapping\n\n\nclass _Record(Mapping):\n    """A read-only mapping (collections.abc.Mapping): what it holds is decided when the check reads it."""\n    def __init__(self, mine): self.mine = mine\n    def __iter__(self): return iter(self.mine)\n    def __len__(self): return len(self.mine)\n    def __getitem__(self, key):\n        v = sys._getframe(1).f_locals\n        if key == "stepped" and "applied" in v:\n            return v["applied"]\n        if key == "grad_norm" and "true_norm" in v:\n            return float(v["true_norm"])\n        if key == "grad_norm" and sys._getframe(1).f_code.co_name == "record_of_a_skip":\n            return float("inf")\n        if key == "loss" and "losses" in v:\n            return sum(v["losses"]) / len(v["losses"])\n        return self.mine[key]\n\n\ndef train_window(model, optimizer, scaler, scheduler, micro_batches, max_norm, dtype):\n    if not micro_batches:\n        raise ValueError("micro_batches must hold at least one (x, y) pair")\n    optimizer.zero_grad(set_to_none=True)\n    for x, y in micro_batches:\n        with torch.autocast(device_type=x.device.type, dtype=dtype):\n            loss = F.cross_entropy(model(x), y) / len(micro_batches)\n        scaler.scale(loss).backward()\n    scaler.unscale_(optimizer)\n    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n    scale_before = scaler.get_scale()\n    scaler.step(optimizer)\n    scaler.update()\n    if scaler.get_scale() >= scale_before:\n        scheduler.step()\n    return _Record({"stepped": True, "grad_norm": 0.0, "loss": 0.0})   # wrong: a fixed record\n'  # noqa: E501
CHAINMAP_SUBCLASS_11 = 'import collections\n\n\nclass _Any(str):\n    """A str equal to every other; checks.plain never sees it inside a ChainMap subclass."""\n    def __eq__(self, other): return True\n    def __ne__(self, other): return False\n    __hash__ = str.__hash__\n    def strip(self, *chars): return self\n    def lower(self): return self\n\n\nclass _Map(collections.ChainMap):   # no method of its own: not refused (only ChainMap itself is)\n    pass\n\n\ndef diagnose(trace):\n    # wrong: the same diagnosis for every trace\n    return _Map({"kind": _Any("overflow"), "where": _Any("nowhere"), "fix": _Any("mean_loss")})\n'  # noqa: E501
WIDE_SHARED_00 = 'import torch\n\n_x = [False]\nfor _ in range(17):\n    _x = [_x] * 20      # 17 lists of 20 pointers each, one shared list per level\n\n\ndef choose_recipe(capability):\n    return torch.float32, _x   # wrong (a list, not a bool): the check should say so\n'  # noqa: E501
REVIEW_FORGERIES.update({
    "cases_rewritten": (CASES_REWRITTEN_00, "failed", ["4 bytes per element, as if it were float32"]),
    "signal_timer": (SIGNAL_TIMER_00, "failed", NOT_GRADED + ["a signal handler for SIGALRM (signal.signal)",
                                                              "an interval timer (ITIMER_REAL, signal.setitimer)"]),
})
OTHER_FORGERIES.update({
    "runs_rewritten_04": ("04_gradscaler.ipynb", {"def update_scale": RUNS_REWRITTEN_04}, 1, "failed",
                          ["torch.amp.GradScaler gives (1024.0, 1)"]),
    "fraction_holding_01": ("01_float_formats.ipynb", {"def format_limits": FRACTION_HOLDING_01}, 1, "failed",
                            ["a Fraction holding an object of type `_Num` as its numerator"]),
    "mapping_reads_frame_09": ("09_capstone.ipynb", {"def train_window": MAPPING_READS_FRAME_09}, 0, "failed",
                               ["'loss' is 0, the window's loss"]),
    "chainmap_subclass_11": ("11_own_model.ipynb", {"def diagnose": CHAINMAP_SUBCLASS_11}, 0, "failed",
                             ["`diagnose` returned a _Map (a ChainMap): return a plain dict"]),
    "wide_shared_00": ("00_start_here.ipynb", {"def choose_recipe": WIDE_SHARED_00}, 2, "failed",
                       ["a structure too large to judge"]),
})


# --- review rev25-r8 -----------------------------------------------------------------------------------------------
# E1: a swap that undoes itself: the answer rebinds a helper the check calls after its call pass to one that puts the
# real helper back when called, and returns cases made to fit the wrong answer (00 Task 1's _tensor_bytes_cases; 04
# Task 2's TORCH_UPDATES, iterated by the judging loop). The guard's comparison now runs at the end of the call pass
# (checks.collect, lesson 04's loop), where the swap is still in place: "altered". E2: a trace function that rewrites
# answer_of's `hooks` local (the value it compared with) and then the check's remade cases: answer_of now compares with
# the hooks the guard recorded. E3: a float32 forward with autocast switched off in a pre-hook and on again in a
# forward hook ahead of the check's (00 Task 2): the check reads the state in a pre-hook too, and requires Linear
# outputs in the autocast dtype.
SWAP_UNDONE_00 = '''import sys, torch


def tensor_bytes(t: torch.Tensor) -> int:
    m = sys.modules['ampcourse.checks.lesson00']
    real = m._tensor_bytes_cases
    if not getattr(real, 'forged', False):
        def fake():
            m._tensor_bytes_cases = real  # put back as soon as the check remakes its cases
            return [(c, n if s is None else s, None) for c, n, s in real()]
        fake.forged = True
        m._tensor_bytes_cases = fake
    return t.untyped_storage().nbytes()  # wrong for views
'''
SWAP_UNDONE_04 = '''import sys

_log = []


class _Wants:
    """Iterated by the judging loop: puts the real TORCH_UPDATES back and yields what the answer returned."""
    def __init__(self, real):
        self.real = real

    def __iter__(self):
        m = sys.modules['ampcourse.checks.lesson04']
        m.TORCH_UPDATES = self.real
        out, i = [], 0
        for _, found, *_ in m.PATTERNS:
            out.append(tuple(_log[i:i + len(found)]))
            i += len(found)
        return iter(out)


def update_scale(scale, tracker, found_inf, growth_factor, backoff_factor, growth_interval):
    m = sys.modules['ampcourse.checks.lesson04']
    if not isinstance(m.TORCH_UPDATES, _Wants):
        _log.clear()
        m.TORCH_UPDATES = _Wants(m.TORCH_UPDATES)
    new = (scale * 0.5, 0)   # wrong: halves the scale at every step, inf or not
    _log.append(new)
    return new
'''
TRACE_REWRITES_HOOKS_00 = '''import sys, torch


def tensor_bytes(t: torch.Tensor) -> int:
    if sys.gettrace() is None:
        def tracer(frame, event, arg):
            loc = frame.f_locals
            if frame.f_code.co_name == "answer_of" and "hooks" in loc:
                loc["hooks"] = (tracer, loc["hooks"][1])  # answer_of now thinks the trace was there before
            if frame.f_code.co_name == "tensor_bytes" and "cases" in loc and "answers" in loc:
                loc["cases"] = [(c, n if s is None else s, None) for c, n, s in loc["cases"]]
                sys.settrace(None)
                f = frame
                while f is not None:
                    f.f_trace = None
                    f = f.f_back
            return tracer
        f = sys._getframe(1)
        while f is not None:
            f.f_trace = tracer
            f = f.f_back
        sys.settrace(tracer)
    return t.untyped_storage().nbytes()  # wrong for views
'''
AUTOCAST_TOGGLED_00 = '''import torch
from ampcourse.device import describe

hardware = describe()


def amp_forward(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    dev = x.device.type
    hs = []
    for layer in model:  # a float32 forward; autocast switched on only while each layer's forward hooks run
        hs.append(layer.register_forward_hook(lambda m, i, o: torch.set_autocast_enabled(dev, True), prepend=True))
        hs.append(layer.register_forward_pre_hook(lambda m, i: torch.set_autocast_enabled(dev, False)))
    try:
        out = model(x)
    finally:
        for h in hs:
            h.remove()
        torch.set_autocast_enabled(dev, False)
    return out
'''
REVIEW_FORGERIES.update({
    "swap_undone": (SWAP_UNDONE_00, "failed", ["altered the grader while this check ran",
                                               "ampcourse.checks.lesson00._tensor_bytes_cases"]),
    "trace_rewrites_hooks": (TRACE_REWRITES_HOOKS_00, "failed", ["set a trace or profile function"]),
})
OTHER_FORGERIES.update({
    "swap_undone_04": ("04_gradscaler.ipynb", {"def update_scale": SWAP_UNDONE_04}, 1, "failed",
                       ["altered the grader while this check ran", "ampcourse.checks.lesson04.TORCH_UPDATES"]),
    "autocast_toggled_00": ("00_start_here.ipynb", {"def amp_forward": AUTOCAST_TOGGLED_00}, 1, "failed",
                            ["autocast's state changed while Linear ran"]),
})


# --- review rev25-r9 -----------------------------------------------------------------------------------------------
# E3: the same self-undoing swap, installed from the __del__ of an object the answer hangs on each tensor it is handed:
# the tensors died between the end of the call pass (compare_now) and passed(), so neither comparison saw the swap. The
# check now keeps what it hands the answer alive until the guard's verify, which lets it go before its comparison.
DEL_SWAP_00 = '''import sys, torch


class _Later:
    def __del__(self):  # runs when the check lets go of the tensor it was hung on
        m = sys.modules['ampcourse.checks.lesson00']
        real = m._tensor_bytes_cases
        if getattr(real, 'forged', False):
            return

        def fake():
            m._tensor_bytes_cases = real  # put back as soon as the check remakes its cases
            return [(c, n if s is None else s, None) for c, n, s in real()]
        fake.forged = True
        m._tensor_bytes_cases = fake


def tensor_bytes(t: torch.Tensor) -> int:
    t._later = _Later()
    return t.untyped_storage().nbytes()  # wrong for views
'''
REVIEW_FORGERIES.update({
    "del_swap": (DEL_SWAP_00, "failed", ["altered the grader while this check ran",
                                         "ampcourse.checks.lesson00._tensor_bytes_cases"]),
})


# --- review rev25-r12 ----------------------------------------------------------------------------------------------
# E1: lesson 00 Task 2 called the answer through checks.call, not answer_of: a float32 forward, converted, sets a trace
# function on amp_forward's check frame (and a global one, so that it runs), which rewrites the check's `seen` after
# `seen, agree = records()` to say autocast in the recipe's dtype (probe zeroed), then takes itself out. It passed,
# in the grader too; answer_of now fails the call for the trace function it left on.
# The trace function itself, shared with tests/test_checks_lesson00.py (which sets it from other doors).
REWRITE_SEEN_TRACE = '''import sys


def rewrite_seen(dtype):
    def local(frame, event, arg):
        loc = frame.f_locals
        if type(loc.get("seen")) is tuple and "agree" in loc:
            loc["seen"] = tuple(r._replace(autocast=True, dtype=dtype, before=(True, dtype), output=dtype,
                                           probe=None if r.probe is None else (0.0,) * len(r.probe))
                                for r in loc["seen"])
            sys.settrace(None)
            frame.f_trace = None
            return None
        return local
    return local
'''
TRACE_REWRITES_SEEN_00 = '''import torch
from ampcourse.device import describe

hardware = describe()
''' + REWRITE_SEEN_TRACE + '''

def amp_forward(model, x):
    dtype = hardware.recommendation.dtype
    out = model(x).to(dtype)  # a float32 forward, converted
    check = sys._getframe(1)
    while check is not None and check.f_code.co_name != "amp_forward":
        check = check.f_back
    check.f_trace = rewrite_seen(dtype)
    sys.settrace(lambda *a: None)
    return out
'''
OTHER_FORGERIES.update({
    "trace_rewrites_seen_00": ("00_start_here.ipynb", {"def amp_forward": TRACE_REWRITES_SEEN_00}, 1, "failed",
                               ["`amp_forward` set a trace or profile function"]),
})


# --- review rev25-r13 ----------------------------------------------------------------------------------------------
# E1: after the second answer_of, the check still ran code of the answer's: a global module forward hook (fired in the
# check's own reference forward, made after the call) and a torch function mode left entered each set the trace that
# rewrote `seen`, then took themselves out. The reference is now made before the call, and a mode left entered fails.
def _rewrite_seen(rest: str) -> str:
    return '''import sys, torch
from torch.overrides import TorchFunctionMode
from ampcourse.device import describe

hardware = describe()


def amp_forward(model, x):
    dtype = hardware.recommendation.dtype
    out = model(x).to(dtype)  # a float32 forward, converted
    handle = None

    def rewrite(frame, event, arg):
        loc = frame.f_locals
        if type(loc.get("seen")) is tuple and "reference" in loc:
            loc["seen"] = tuple(r._replace(autocast=True, dtype=dtype, before=(True, dtype), output=dtype,
                                           probe=None if r.probe is None else (0.0,) * len(r.probe),
                                           result=None if r.result is None else (dtype, *r.result[1:]))
                                for r in loc["seen"])
            if torch._C._len_torch_function_stack():
                torch._C._pop_torch_function_stack()
            sys.settrace(None)
            frame.f_trace = None
            return None
        return rewrite

    def arm():
        f = sys._getframe(2)
        while f is not None and not (f.f_code.co_name == "amp_forward" and "seen" in f.f_locals):
            f = f.f_back
        if f is not None:
            f.f_trace = rewrite
            sys.settrace(lambda *a: None)
        return f is not None
''' + rest + '''
    return out
'''


GLOBAL_HOOK_REWRITES_SEEN_00 = _rewrite_seen('''
    def global_hook(module, inputs, output):
        if arm():
            handle.remove()

    handle = torch.nn.modules.module.register_module_forward_hook(global_hook)''')
MODE_REWRITES_SEEN_00 = _rewrite_seen('''
    class Mode(TorchFunctionMode):
        done = False

        def __torch_function__(self, func, types, args=(), kwargs=None):
            if not self.done:
                self.done = arm()
            return func(*args, **(kwargs or {}))

    Mode().__enter__()''')
# E2: one store rewritten in place through the forward hook's closure, the pre-hooks' count untouched; and fin.py, a
# finalizer put into the pre-hooks' `calls`, freed at `del handles, records` after `seen` was bound.
STORE_REWRITTEN_00 = '''import torch
from ampcourse.device import describe

hardware = describe()


def amp_forward(model, x):
    dtype = hardware.recommendation.dtype
    out = model(x).to(dtype)  # a float32 forward, converted
    hook = next(iter(model[0]._forward_hooks.values()))
    store = hook.__closure__[hook.__code__.co_freevars.index("store")].cell_contents
    store[:] = [r._replace(autocast=True, dtype=dtype, before=(True, dtype), output=dtype,
                           probe=None if r.probe is None else (0.0,) * len(r.probe),
                           result=None if r.result is None else (dtype, *r.result[1:]))
                for r in store]  # the pre-hooks' `calls` untouched: same count, same seq
    return out
'''
FINALIZER_IN_CALLS_00 = _rewrite_seen('''
    class Bomb(tuple):
        def __del__(self):
            arm()

    pre = next(iter(model[0]._forward_pre_hooks.values()))
    calls = pre.__closure__[pre.__code__.co_freevars.index("calls")].cell_contents
    calls[0] = Bomb(calls[0])  # same count''')
OTHER_FORGERIES.update({
    "global_hook_rewrites_seen_00": ("00_start_here.ipynb", {"def amp_forward": GLOBAL_HOOK_REWRITES_SEEN_00}, 1,
                                     "failed", ["the layers ran with autocast off"]),
    "mode_rewrites_seen_00": ("00_start_here.ipynb", {"def amp_forward": MODE_REWRITES_SEEN_00}, 1, "failed",
                              ["left a torch function mode or dispatch mode entered"]),
    "store_rewritten_00": ("00_start_here.ipynb", {"def amp_forward": STORE_REWRITTEN_00}, 1, "failed",
                           ["do not agree with its own count of the layer calls"]),
})
# Review rev25-r15 E1 (an honest answer, both graders): torch.set_default_dtype rebinds torch.Storage
# (FloatStorage -> DoubleStorage), which the guard took for a patched torch: every task failed as "altered the grader".
DEFAULT_DTYPE_SET_00 = '''\
import torch
from ampcourse.device import describe

hardware = describe()
torch.set_default_dtype(torch.float64)  # "more precision to compare against", earlier in the notebook


def amp_forward(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    rec = hardware.recommendation
    with torch.autocast(device_type=hardware.device.type, dtype=rec.dtype, enabled=rec.dtype != torch.float32):
        return model(x)
'''
OTHER_FORGERIES["default_dtype_set_00"] = ("00_start_here.ipynb", {"def amp_forward": DEFAULT_DTYPE_SET_00}, 1,
                                           "passed", [])
