"""The no-context review's forgeries (and a legitimate answer beside them), shared by both graders' tests.

Each is Task 1's answer cell of exercise 00. ``grade`` (tests/test_grading_integrity.py) and ``pytest --nbval
exercises/`` (tests/test_pytest_plugin.py) must fail every forgery with the words given, and pass the legitimate one.
"""

THREAD_FORGERY = (
    "import torch, threading, sys, time\n"
    "def tensor_bytes(t: torch.Tensor) -> int:\n    return 0\n"
    "def _loop():\n    while True:\n        m = sys.modules.get('ampcourse.checks.lesson00')\n"
    "        if m is not None:\n            m.tensor_bytes = lambda f: print('forged')\n        time.sleep(0.0002)\n"
    "threading.Thread(target=_loop, daemon=True).start()\n")
TORCH_FORGERY = ("import torch\ntorch.Tensor.element_size = lambda self: 4\n"
                 "def tensor_bytes(t: torch.Tensor) -> int:\n    return t.numel() * 4\n")
DURING_CHECK = (  # right on the check's first case only; then rebinds the check's helper `call` mid-check
    "import sys, torch\ndef tensor_bytes(t):\n    m = sys.modules['ampcourse.checks.lesson00']\n"
    "    m.call = lambda task, fn, name, x: x.numel() * x.element_size()\n    return 4000\n")
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
    # the thread is let run (torch.compile's pool is one too): the check after it finds the patched function
    "thread": (THREAD_FORGERY, "failed", ["altered the grader while this check ran",
                                          "ampcourse.checks.lesson00.tensor_bytes"]),
    "torch_patch": (TORCH_FORGERY, "failed", ["4 bytes per element"]),
    "during_check": (DURING_CHECK, "failed", ["altered the grader while this check ran",
                                              "ampcourse.checks.lesson00.call"]),
    "trace_hook": (TRACE_HOOK, "failed", ["cannot be graded", "sys.settrace"]),
    "audit_hook": (AUDIT_HOOK, "failed", ["cannot be graded", "audit hook"]),
    "legit_threads": (LEGIT_THREADS, "passed", []),
    "open_pool": (OPEN_POOL, "passed", []),
}
