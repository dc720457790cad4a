"""``python -m ampcourse grade``: grade the exercises and print a progress table.

The grader knows what each exercise should check: the exercise as ``build`` generates it from
``solutions/`` (:func:`ampcourse.authoring.make_exercise`). It runs *that* template's check cells
with the learner's answer cells and added cells put in (:func:`ampcourse.authoring.merge_exercise`),
one cell at a time in a fresh kernel, so a deleted, emptied or edited check cell (``# NBVAL_SKIP``,
``# NBVAL_RAISES_EXCEPTION``, a ``print("✓")``) still runs the real check. Every task ends *passed*,
*not started* (its stub still raises ``NotImplementedError``) or *failed*, and each failure says why:
the check's message, or the error's type and line.

It never hangs: a cell that runs longer than the timeout (``DEFAULT_TIMEOUT`` seconds, or
``--timeout``) is interrupted and reported; if the learner's code kills the Python process
(``os._exit``, the out-of-memory killer), that task is reported as such, the kernel is restarted, the
cells before it are run again and grading goes on with the next task. A notebook that cannot be read
(a half-written save, merge-conflict markers) is reported and the others are graded.

A task's answer is found by where it is, not by cell ids (:func:`ampcourse.authoring.match_cells`): the
code cells between the task's text and its check, the one defining the stub's function. A kernel reply
other than "ok" or "error" (ipykernel's "aborted" after an error) means the cell did not run: it is sent
again once, then reported, never counted as passed.

What is guarded. Before each check the grader undoes what answer cells did to it and notes it
(:func:`guard_reset`): patched check modules (every ``from ampcourse.checks import lessonNN as name`` of any cell of
the exercise, :func:`_guard_modules`) and ``ampcourse`` modules (every attribute of every loaded ``ampcourse.*``
module, each function's code, defaults and closure, the values of its public tables, and each course class's own
``__dict__``, methods' code and properties' accessors included: :func:`_module_entry`), a rebound ``check``,
``ampcourse.checks.__path__``, input/AST transformers, event callbacks, the shell's and kernel's methods (with the
course's error display, ``CustomTB``/``custom_exceptions``; IPython's compiler ``shell.compile`` with its class's
``ast_parse``/``__call__``/``cache`` ..., and the input transformer manager's class methods: :data:`GUARDED_METHODS`);
the guard's thread-start recorder (:func:`_thread_starter`); and every public attribute (plus dunders) of torch's
core namespaces (:data:`TORCH_NAMESPACES`: ``torch``, ``torch.Tensor``, ``torch.nn``, ``torch.nn.Module``,
``torch.nn.functional``, ``torch.amp``, ``torch.autocast``, ``torch.amp.GradScaler``, ``torch.optim`` and its
``Optimizer``/``SGD``/``AdamW``, ``torch.cuda(.amp)``, ``torch.finfo``, ``torch.dtype``; each class with its MRO; the
private names of :data:`GUARDED_PRIVATE`: ``torch._amp_*``, ``torch._foreach_*``, GradScaler's; and the
code and ``__dict__`` of each of their Python functions and of each function along its ``__wrapped__`` chain,
:func:`_function_dicts`, where ``_disable_dynamo``'s wrapper finds ``__dynamo_disable``: torch's own is recognised,
:func:`_dynamo_disable`), of IPython's ``ExecutionResult``/``ExecutionInfo``, ``compilerop`` and
``inputtransformer2`` (:data:`IPYTHON_NAMESPACES`), of ``builtins`` (``isinstance``,
``abs``, ...) and of each module or class a check module names at top level (``math``, ``numbers``, ``copy``,
``statistics``, ``warnings``, ``mock`` ...), remembered before the first answer cell (:func:`_namespace_changes`).
Not a change: the wrappers torch itself installs (:data:`TORCH_WRAPPERS`, recognised by their code as compiled from
torch's own file, never by the file name or ``__wrapped__`` they claim: :func:`_torch_wrapper`). Right after each check
:func:`guard_verify` compares all of the above with what the reset left.

The verdict (:func:`guard_verdict`, the same in ``pytest --nbval``). A task fails as "cannot be graded" when the guard
could not answer before or after its check (:data:`UNVERIFIED`: an answer replaced the shell's
``user_expressions``), or, at either end, a ``sys``/``threading`` trace or profile function, an audit hook, a
``gc.callbacks`` entry or a changed gc threshold, a torch function or dispatch mode left entered, a signal handler of
the learner's code or an interval timer (code that runs inside the check without a thread: review rev25-r6 E5,
rev25-r7 W1; what a check hands the answer and gets back is kept alive until the verify lets it go before its
comparison, ``checks.keep``, rev25-r9 E3; finalizers of the answer's other garbage are not covered), a thread
started with ``_thread`` that ``threading`` does not list, or a Python thread started after the guard was installed
that runs the learner's code (:func:`_thread_code`: its target, or a frame on its stack, is not code compiled from a
file of the standard library, site-packages or the course, as that file is on disk: a claimed ``co_filename`` is not
enough; or is such code run with globals other than its own module's) was there (:func:`guard_hazards`); so does a
thread of the learner's code *started while the check ran* (finished or not: the guard notes every thread start,
:func:`_thread_starter`), unless it ended (joined or finished) inside one call of the answer's function
(``ampcourse.checks.call``/``noted_call`` note when each call began and ended; every check calls the learner through
one of them). It fails as altered when something changed while the check ran, or when ``ampcourse.checks.passed``,
which runs the guard's comparison *before* it prints the ✓ line, found a change then (a change undone after the
check's last judgement, by code left in ``sys.stdout``, in a display hook or in a thread, is seen there). A thread
that runs library code only (torch.compile's workers, a DataLoader's, an open ThreadPoolExecutor waiting for work)
earns a note: it is judged at both ends, and work it is given between them is not seen; so does a library thread the
learner's code started while the check ran (:data:`STARTED_NOTE`: a ThreadPoolExecutor's worker). And a check cell
counts as passed only when its reply is "ok", it published no error on iopub, it printed its check's own ``✓ Task
N`` line, and the course's own check function recorded its pass (:func:`output_problem`; ``ampcourse.checks.passed``
records the reset's nonce, the task and its caller's code and globals, which :func:`guard_verify` requires to be a
function of a guarded check module as the reset re-executed it): a check cell rewritten to print a ✓ line without
running the real check makes no record. Only a check verified so gets the note "only the real check counted".

What is not guarded: other private names (one leading underscore) of those namespaces, other torch submodules and
classes (a torch module replaced in ``sys.modules`` included), other third-party libraries (numpy, IPython beyond the
above), C extensions and C-level state (``torch._C`` types can be changed from C; a C extension can do anything),
operator kernels or overrides registered with torch's dispatcher (``torch.library``, ``torch._C._dispatch_*``: "torch
patches", CONTRIBUTING "The grading guard", means torch attributes and functions replaced, which the comparison above
sees; a registration changes none of them, review rev25-r14 E1), the
values inside objects other than the course modules' public tables (a tensor a check reads, mutated in place), a
change the answer's own function makes during the check and undoes before it returns (frames, ``sys._getframe``
tricks, a module global swapped and put back), nor what the answer's function *writes* while it runs: any local of
the check's frames (a list, a dict, a tensor) and any object alive (``gc.get_objects()``). The call-first checks
(lesson 00's three, lesson 02's Tasks 2/3, lesson 04's Task 2: ``checks.collect``/``answer_of``; lesson 00's Task 2
through its own frozen hook records, kept by the hooks' closures, and a reference made before the call from its
constants, frozen as floats: review rev25-r11 E2, rev25-r13 E1) therefore keep each answer frozen (numbers,
strings, dtypes, tuples of them) in tuples built by
rebinding, and judge cases they make again after the last call from their constants (review rev25-r7 E1); the
guard's comparison runs at the end of their call pass (``checks.compare_now``, as ``passed()`` runs it before it
prints), so a swap made during the calls is seen while it is in place, even one that puts itself back when the check
next calls the swapped helper (review rev25-r8 E1); a swap made after the call pass must last until ``passed()``'s
comparison, unless something racing it, a thread, undoes it between the two (a gc callback, a torch mode or a signal
handler would too: those are hazards, above); a trace or profile function the answer's call leaves on when it
returns, or a ``frame.f_trace`` on the check's own frames, fails that call (``checks.answer_of``, lesson 00's Task 2
too, comparing with the hooks the reset recorded in the run record, review rev25-r8 E2, rev25-r12 E1), and lesson
00's Task 2 fails a torch mode left entered or torch's global module hooks changed after the call (rev25-r13 E1).
That covers a trace on when the call returns, not code of the answer's that runs later inside the check and sets
one (a finalizer timed to run there, a hook reached through the check's own objects, an operator kernel or override
registered through ``torch.library`` that the check's own torch calls run: review rev25-r14 E1), nor ``ctypes``
(``PyFrame_LocalsToFast``), ``sys.monitoring`` or CPython 3.13's writable ``frame.f_locals``: code written to reach
into a running check is outside the guard's threat model (CONTRIBUTING "The grading guard").
Other checks still compute their expected values
first, and there the answer's own function can read them while it runs; the check modules' public tables (answers,
reference literals such as lesson 04's ``TORCH_UPDATES``) are readable by any cell. An answer returned through
``checks.call``, or ``noted_call(..., plain_as=...)``, is converted to plain values in the call pass,
``checks.plain``/``exact_number``/``real_number``: a value-type subclass becomes its content, a Mapping of the
answer's own a dict read once, a Fraction is taken only with two exact ints inside; an object whose class defines
comparison or conversion dunders, a library class whose such dunders were replaced after ``ampcourse.checks`` was
imported, a tensor with a method shadowed by an attribute of its own, a ChainMap, mappingproxy or SimpleNamespace (or
a subclass) is refused, and the judgements of lessons 00, 04, 07 and 10 that read a returned tensor call its methods
through the class, ``torch.Tensor.float(t)``; an object of another class passes as it is, and what other library
objects hold is not examined: review rev25-r5 E1/E2, rev25-r6 E1-E4, rev25-r7 E1-E4),
``sys.stdout``/``sys.displayhook``/``shell.display_trap.hook`` themselves (code
there runs after ``passed()``'s comparison), which function a check cell hands the check, and what the check cell
runs: the guard covers the compiler's and transformer manager's methods, the transformer lists' items, and the
public names of ``IPython.core.compilerop`` and ``IPython.core.inputtransformer2`` with their functions' code and
``__dict__`` (review rev25-r4 E3: a module global ``compile``, a cleanup transform's ``__code__``), but a check cell
rewritten by another object on IPython's path (another module's function, ``codeop``, a C-level hook) can run the
*real* check inside a temporary patch of its own, which makes a genuine pass record (the record proves the real check
ran, not that it ran unpatched; ``passed()``'s comparison sees a patch still in place then). Nor a thread started
with the original ``_thread.start_new_thread`` taken from the guard's recorder, nor
the guard's own state in the kernel beyond its answering at all (``sys.modules['_ampcourse_grader_guard']``: its
pass records, thread starts and ``passed()``'s comparison can be written there). It is not a sandbox: one cell
written to forge a pass can still get one (README).

Only a notebook that cannot be read is "unreadable"; a broken environment is reported as such (``./course
doctor``). A notebook in ``exercises/`` without a solution is the learner's own and is not graded.

Grading reads the *saved* notebooks: save in JupyterLab first (Ctrl+S).

:func:`check_cell_problems` says which tasks' check cells are not as the course made them (deleted,
emptied, edited, or marked for nbval to skip); ``pytest --nbval exercises/`` uses it too
(:mod:`ampcourse.pytest_plugin`), so a run without the real checks never looks like a pass.
"""

from __future__ import annotations

import queue
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from .authoring import make_exercise, merge_exercise, read, tags, task_title
from .course import ROOT

DEFAULT_TIMEOUT = 180  # seconds per cell: several times the slowest honest answer (exercise 09, ~35 s on 2 cores)
SAVE_FIRST = "grading reads the saved notebooks: save first (Ctrl+S in JupyterLab)"
NBVAL_MARKER = re.compile(r"#\s*NBVAL_\w+|#\s*PYTEST_VALIDATE_IGNORE_OUTPUT")
IMPORT = re.compile(r"^(from\s+\S+\s+)?import\s")
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
DIED = ("your code stopped the Python process (the kernel died: os._exit(), a crash, or the system ran out "
        "of memory and killed it). Find the line that ends the process; the grader restarted Python and went on")


@dataclass
class CheckResult:
    task: str
    status: str  # "passed" / "not started" / "failed"
    reason: str = ""


@dataclass
class ExerciseResult:
    name: str
    checks: list[CheckResult]
    problems: list[str] = field(default_factory=list)  # failing non-check cells, an unreadable file
    notes: list[str] = field(default_factory=list)  # e.g. an edited check cell that was replaced

    @property
    def status(self) -> str:
        if self.checks and all(c.status == "passed" for c in self.checks) and not self.problems:
            return "passed"
        if self.checks and all(c.status == "not started" for c in self.checks) and not self.problems:
            return "not started"
        return "failed"


# --- running one cell at a time -----------------------------------------------------------------------

@dataclass
class CellRun:
    status: str  # "ok" / "error" / "timeout" / "died" / "not run" (the kernel answered "aborted" or another status)
    ename: str = ""
    evalue: str = ""
    line: int | None = None
    user_expressions: dict = field(default_factory=dict)
    stdout: str = ""  # what the cell printed (iopub "stream" messages)
    errors: list = field(default_factory=list)  # the "error" messages it published on iopub: (ename, evalue)


class Kernel:
    """A python3 kernel that runs one cell at a time with a timeout, and notices if it dies."""

    def __init__(self, cwd: Path, startup_timeout: float = 60):
        self.cwd, self.startup_timeout = cwd, startup_timeout
        self.km = self.kc = None
        self.restarts = 0
        self.running, self.iopub = None, []
        self.start()

    def start(self) -> None:
        from jupyter_client.manager import KernelManager

        self.km = KernelManager(kernel_name="python3")
        self.km.start_kernel(cwd=str(self.cwd), stderr=subprocess.DEVNULL)  # no transport warnings
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=self.startup_timeout)

    def stop(self) -> None:
        if self.kc is not None:
            self.kc.stop_channels()
        if self.km is not None:
            try:
                self.km.shutdown_kernel(now=True)
            except Exception:  # noqa: BLE001 - already dead
                pass
        self.km = self.kc = None

    def restart(self) -> None:
        self.stop()
        self.start()
        self.restarts += 1

    def _drain(self) -> None:
        """Read what iopub holds; keep the stream text and errors of the cell being run (``self.iopub``)."""
        try:
            while True:
                msg = self.kc.get_iopub_msg(timeout=0)
                if msg.get("parent_header", {}).get("msg_id") == getattr(self, "running", None):
                    self.iopub.append(msg)
        except queue.Empty:
            pass

    def _outputs(self, msg_id: str) -> tuple[str, list]:
        """``(stdout, errors)`` of ``msg_id`` from iopub, waiting (a little) for its "idle" status."""
        start = time.monotonic()  # a real kernel has said "busy" by now; a silent one (a test's stand-in) is let go
        while time.monotonic() - start < (10 if self.iopub else 0.5) and not any(
                m.get("msg_type") == "status" and m["content"].get("execution_state") == "idle" for m in self.iopub):
            try:
                msg = self.kc.get_iopub_msg(timeout=0.2)
            except queue.Empty:
                continue
            if msg.get("parent_header", {}).get("msg_id") == msg_id:
                self.iopub.append(msg)
        stdout = "".join(m["content"].get("text", "") for m in self.iopub
                         if m.get("msg_type") == "stream" and m["content"].get("name") == "stdout")
        errors = [(m["content"].get("ename", ""), m["content"].get("evalue", "")) for m in self.iopub
                  if m.get("msg_type") == "error"]
        return stdout, errors

    def _wait(self, msg_id: str, seconds: float) -> dict | None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                msg = self.kc.get_shell_msg(timeout=0.2)
            except queue.Empty:
                self._drain()
                if not self.km.is_alive():
                    return {"status": "died"}
                continue
            if msg["parent_header"].get("msg_id") == msg_id:
                self._drain()
                return msg["content"]
        return None

    def run(self, source: str, timeout: float, user_expressions: dict | None = None) -> CellRun:
        """Run one cell. A reply other than "ok" or "error" ("aborted": ipykernel drops requests that arrive
        while it is still aborting after an error) means the cell did not run: it is sent once more, then
        reported as "not run", never as a pass. ``stop_on_error=False``: an error does not abort what follows."""
        for _attempt in range(2):
            msg_id = self.kc.execute(source, allow_stdin=False, store_history=not user_expressions,
                                     silent=bool(user_expressions), user_expressions=user_expressions or {},
                                     stop_on_error=False)
            self.running, self.iopub = msg_id, []
            reply = self._wait(msg_id, timeout)
            if reply is None:  # too long: interrupt, as the Stop button does
                self.km.interrupt_kernel()
                reply = self._wait(msg_id, 10)
                if reply is None or reply.get("status") == "died":
                    self.restart()  # it did not stop: end it
                return CellRun("timeout")
            status = reply.get("status")
            if status == "died":
                self.restart()
                return CellRun("died")
            stdout, errors = self._outputs(msg_id) if not user_expressions else ("", [])
            if status == "error":
                return CellRun("error", reply.get("ename", ""), reply.get("evalue", ""),
                               _error_line(reply.get("traceback", [])), stdout=stdout, errors=errors)
            if status == "ok":
                return CellRun("ok", user_expressions=reply.get("user_expressions", {}) or {}, stdout=stdout,
                               errors=errors)
        return CellRun("not run", ename=str(status))


def _error_line(traceback: list[str]) -> int | None:
    """The line of the learner's cell where the error was raised (the last ``Cell In[n], line k``)."""
    lines = re.findall(r"Cell In\[\d+\], line (\d+)", ANSI.sub("", "\n".join(traceback)))
    return int(lines[-1]) if lines else None


def _reason(run: CellRun, timeout: float) -> str:
    if run.status == "timeout":
        return (f"stopped after {timeout:g} s: the code ran too long (a loop that never ends?). The grader gives "
                f"each cell {timeout:g} s (python -m ampcourse grade --timeout SECONDS to change it)")
    if run.status == "died":
        return DIED
    if run.status == "not run":
        return (f"the kernel did not run this cell (it answered {run.ename!r}, twice), so it does not count: "
                "grade again; if it keeps happening, run ./course doctor")
    if run.ename in ("CheckFailed", "NotStarted"):
        return ANSI.sub("", run.evalue).strip()
    where = f" (line {run.line})" if run.line else ""
    return f"{run.ename}: {ANSI.sub('', run.evalue).strip()}{where}"



# --- the grader's own state in the kernel: what an answer cell must not change ---------------------------------
#
# ``grade`` runs the learner's cells and the course's checks in one kernel, so an answer cell could patch the
# checks (``check.tensor_bytes = lambda f: None``) or the helpers they call (``ampcourse.checks.call``), rebind
# ``check``, put a folder of forged checks first on ``ampcourse.checks.__path__``, install an IPython input/AST
# transformer or event callback that rewrites the check cell, or replace the shell's or the kernel's methods
# (``transform_cell``, ``run_code``, ``do_execute``, ``session.send``) to hide an error. Before each check the
# grader puts all of that back and reports what it had to undo. The guard functions below never run from an
# importable module in the kernel (an answer cell could replace them there): the grader sends their source,
# from its own process, with every call (as ``user_expressions``, which no input transformer sees; see
# :func:`guard_expression`). The check modules are re-executed from their files, whatever ``__path__`` says.
# This stops the quiet forgeries the audits tried; it is not a sandbox (README: one cell can still forge a pass).

CHECK_IMPORT = re.compile(r"^\s*from\s+ampcourse\.checks\s+import\s+(lesson\d+)\s+as\s+(\w+)", re.M)
CHECK_IMPORT_DOTTED = re.compile(r"^\s*import\s+ampcourse\.checks\.(lesson\d+)\s+as\s+(\w+)", re.M)
_GUARD: dict = {}
# What an answer cell could replace to hide a failing check: ``{attribute path from the shell: method names}``.
GUARDED_METHODS = {
    "shell": ("transform_cell", "transform_ast", "run_cell", "run_cell_async", "_run_cell", "run_code",
              "run_ast_nodes", "should_run_async", "showtraceback", "_showtraceback", "user_expressions",
              # the course's own error display (``set_custom_exc`` in ampcourse.checks): replaced, it hides errors
              "CustomTB", "custom_exceptions", "set_custom_exc", "InteractiveTB", "SyntaxTB", "showsyntaxerror",
              "compile"),
    # IPython parses and compiles each cell through these (review rev25-r3 E1): replaced, they rewrite a check cell
    "shell.compile": ("ast_parse", "__call__", "cache", "format_code_name", "get_code_name", "extra_flags",
                      "reset_compiler_flags"),
    "shell.input_transformer_manager": ("transform_cell", "do_one_token_transform", "do_token_transforms",
                                        "check_complete"),
    "shell.kernel": ("do_execute", "execute_request", "send_response"),
    "shell.kernel.session": ("send", "serialize"),
}


def _transformer_lists(shell) -> dict:
    manager = shell.input_transformer_manager
    return {"input transformers": [(manager, "cleanup_transforms"), (manager, "line_transforms"),
                                   (manager, "token_transformers"), (shell, "input_transformers_post")],
            "AST transformers": [(shell, "ast_transformers")]}


def _guarded_objects(shell) -> dict:
    """``{"shell.kernel": object}`` for each :data:`GUARDED_METHODS` owner the shell has."""
    out = {}
    for where in GUARDED_METHODS:
        obj = shell
        for attr in where.split(".")[1:]:
            obj = getattr(obj, attr, None)
        if obj is not None:
            out[where] = obj
    return out


def _method_slots(shell) -> dict:
    """``{(owner path, method, where): value}`` for every guarded method: on the instance and on each class of its
    MRO (None where not defined), so a patch on the instance or on a class is seen and undone."""
    slots = {}
    for where, obj in _guarded_objects(shell).items():
        for name in GUARDED_METHODS[where]:
            slots[(where, name, "instance")] = vars(obj).get(name, None) if hasattr(obj, "__dict__") else None
            for cls in type(obj).__mro__:
                slots[(where, name, cls)] = cls.__dict__.get(name, None)
    return slots


def _plain_copy(value, depth: int = 0):
    """A copy of ``value`` if it is plain data (numbers, strings, dtypes, devices, and dicts, lists, tuples, sets
    of them, a few levels deep), else the marker ``_plain_copy`` (not compared by value)."""
    import torch

    if depth > 4:
        return _plain_copy
    if value is None or type(value) in (bool, int, float, complex, str, bytes, torch.dtype, torch.device):
        return value
    if type(value) in (tuple, list, set, frozenset):
        items = [_plain_copy(v, depth + 1) for v in value]
        return _plain_copy if any(v is _plain_copy for v in items) else type(value)(items)
    if isinstance(value, dict) or type(value).__name__ == "mappingproxy":
        items = {_plain_copy(k, depth + 1): _plain_copy(v, depth + 1) for k, v in dict(value).items()}
        if any(k is _plain_copy or v is _plain_copy for k, v in items.items()):
            return _plain_copy
        return items
    if depth and _function_state(value) is not None:  # a function in a table (a rule's condition): by identity
        return ("__function__", value, _function_state(value))
    fields = getattr(type(value), "__dataclass_fields__", None)
    if fields is not None and hasattr(value, "__dict__"):  # a row of a table (a frozen dataclass)
        items = {k: _plain_copy(v, depth + 1) for k, v in vars(value).items()}
        return _plain_copy if any(v is _plain_copy for v in items.values()) else (type(value), items)
    return _plain_copy


def _same(a, b) -> bool:
    """Whether two :func:`_plain_copy` results are equal, a NaN equal to a NaN (``lesson07.NAN``)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return a == b or (a != a and b != b)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return a == b


def _function_state(value):
    """What a function's identity does not pin down: its code, defaults and closure contents (an answer can set
    ``f.__code__`` of a check's function in place)."""
    value = getattr(value, "__func__", value)
    code = getattr(value, "__code__", None)
    if code is None or not hasattr(value, "__defaults__"):
        return None
    cells = tuple(id(c.cell_contents) if c.cell_contents is not None else None for c in (value.__closure__ or ())
                  if _cell_filled(c))
    return (code, value.__defaults__, value.__kwdefaults__, cells)


def _cell_filled(cell) -> bool:
    try:
        _ = cell.cell_contents
    except ValueError:
        return False
    return True


def _closure_contents(fn) -> list | None:
    """The values held in ``fn``'s closure, in order; None where a cell is empty."""
    cells = fn.__closure__ or ()
    if not all(_cell_filled(c) for c in cells):
        return None
    return [c.cell_contents for c in cells]


def _module_entry(module) -> tuple:
    """``(module, {attribute: value}, {attribute: plain copy}, {attribute: function state}, {attribute: class
    state})``: every attribute but submodules and dunders (by identity), the public plain data by value (a table
    such as ``facts.BYTES_PER_ELEMENT`` mutated in place), each function's code, defaults and closure
    (:func:`_function_state`), and each class defined in a course module, by what its ``__dict__`` holds
    (:func:`_class_state`: ``device.Recommendation.dtype = property(...)`` or ``SpyScaler.step = ...``)."""
    attrs = {k: v for k, v in vars(module).items()
             if not (k.startswith("__") and k.endswith("__")) and not isinstance(v, type(sys))}
    values = {}
    for k, v in attrs.items():
        if not k.startswith("_") and not callable(v):
            copied = _plain_copy(v)
            if copied is not _plain_copy:
                values[k] = copied
    states = {k: _function_state(v) for k, v in attrs.items() if _function_state(v) is not None}
    classes = {k: _class_state(v) for k, v in attrs.items()
               if isinstance(v, type) and str(getattr(v, "__module__", "")).startswith("ampcourse")}
    return module, attrs, values, states, classes


def _member_state(value):
    """What identity does not pin down of a class member: a function's state (:func:`_function_state`; a
    staticmethod's or classmethod's too), a property's getter, setter and deleter states."""
    if isinstance(value, property):
        return tuple((f, _function_state(f)) for f in (value.fget, value.fset, value.fdel))
    return _function_state(value)


def _class_state(cls) -> tuple:
    """``(class, {name: value}, {name: member state})`` of a course class's own ``__dict__``
    (:func:`_member_state`); ``__slotnames__`` (``copy``'s cache) is left out."""
    members = {k: v for k, v in vars(cls).items() if k != "__slotnames__"}
    return cls, members, {k: _member_state(v) for k, v in members.items() if _member_state(v) is not None}


def _restore_function(fn, state) -> None:
    fn = getattr(fn, "__func__", fn)
    fn.__code__, fn.__defaults__, fn.__kwdefaults__ = state[0], state[1], state[2]


def _class_changes(where: str, saved: tuple, restore: bool) -> list[str]:
    """What differs in a course class from ``saved`` (:func:`_class_state`): a member set, rebound or deleted, a
    method's code, a property's accessor; with ``restore``, put each back."""
    cls, members, states = saved
    now = {k: v for k, v in vars(cls).items() if k != "__slotnames__"}
    changed = []
    for name in sorted(set(members) | set(now)):
        if now.get(name, _class_changes) is not members.get(name, _class_changes):
            old = members.get(name)
            if old is None:  # torch wraps an inherited method on the class itself (dynamo's __setattr__)
                old = next((vars(c)[name] for c in cls.__mro__[1:] if name in vars(c)), None)
            own_flag = name not in members and name in [a for names in TORCH_OWN_ATTRIBUTES.values() for a in names]
            if name in now and (_torch_wrapper(now[name], old, name) or (own_flag and type(now[name]) is bool)):
                members[name] = now[name]  # torch's own (the first SpyOptimizer wraps its step): from now on
                if _member_state(now[name]) is not None:
                    states[name] = _member_state(now[name])
                continue
            changed.append(f"{where}.{name}")
            if restore:
                try:
                    if name in members:
                        type.__setattr__(cls, name, members[name])
                    else:
                        type.__delattr__(cls, name)
                except (AttributeError, TypeError):
                    pass
    for name, state in states.items():
        value = members[name]
        if _member_state(value) == state:
            continue
        changed.append(f"{where}.{name}")
        if restore and isinstance(value, property):
            for fn, part in state:
                if fn is not None and part is not None:
                    _restore_function(fn, part)
        elif restore:
            _restore_function(value, state)
    return list(dict.fromkeys(changed))


def _course_modules() -> dict:
    """``{name: entry}`` (:func:`_module_entry`) for every loaded ``ampcourse`` module but the grader's."""
    return {name: _module_entry(module) for name, module in list(sys.modules.items())
            if module is not None and (name == "ampcourse" or name.startswith("ampcourse."))
            and name != "ampcourse.grading"}


def _put_back(value, saved) -> bool:
    """Mutate ``value`` (a dict, list, set, dataclass row, or a tuple of those) back to the plain copy ``saved``;
    False where it cannot."""
    import copy

    if isinstance(value, dict) and isinstance(saved, dict):
        value.clear()
        value.update(copy.deepcopy(saved))
        return True
    if isinstance(value, list) and isinstance(saved, list):
        value[:] = copy.deepcopy(saved)
        return True
    if isinstance(value, set) and isinstance(saved, set):
        value.clear()
        value.update(saved)
        return True
    if isinstance(saved, tuple) and len(saved) == 2 and isinstance(saved[0], type):
        if type(value) is not saved[0] or not hasattr(value, "__dict__"):
            return False
        for k, v in saved[1].items():
            if not _same(_plain_copy(getattr(value, k, _put_back), 1), v):
                if isinstance(v, tuple) and len(v) == 3 and v[0] == "__function__":
                    object.__setattr__(value, k, v[1])
                    fn = getattr(v[1], "__func__", v[1])
                    fn.__code__, fn.__defaults__, fn.__kwdefaults__ = v[2][0], v[2][1], v[2][2]
                else:
                    object.__setattr__(value, k, copy.deepcopy(v))
        return True
    if isinstance(value, tuple) and isinstance(saved, tuple) and len(value) == len(saved):
        return all(_same(_plain_copy(v, 1), c) or _put_back(v, c) for v, c in zip(value, saved, strict=True))
    return False


def _course_changes(saved: dict, restore: bool) -> list[str]:
    """What differs in the course's modules from ``saved`` (:func:`_course_modules`); with ``restore``, put each
    back: the module in ``sys.modules``, a rebound or deleted attribute, a function's code, a table's values, a
    course class's members (:func:`_class_changes`)."""
    changed = []
    for module_name, (module, attrs, values, states, classes) in saved.items():
        if sys.modules.get(module_name) is not module:
            changed.append(f"the module {module_name}")
            if restore:
                sys.modules[module_name] = module
        now = vars(module)
        for attr, value in attrs.items():
            if now.get(attr, _course_changes) is not value:
                changed.append(f"{module_name}.{attr}")
                if restore:
                    setattr(module, attr, value)
        for attr, state in states.items():
            if _function_state(attrs[attr]) != state:
                changed.append(f"{module_name}.{attr}")
                if restore:
                    _restore_function(attrs[attr], state)
        for attr, class_state in classes.items():
            changed += _class_changes(f"{module_name}.{attr}", class_state, restore)
        for attr, copied in values.items():
            if not _same(_plain_copy(attrs[attr]), copied):
                changed.append(f"{module_name}.{attr} (its values)")
                if restore:
                    _put_back(attrs[attr], copied)
    return changed


# A Python thread the answers left running is judged by its code: its target (a ``Timer``'s function, a
# ``Thread``'s target and the callables among its arguments, an overridden ``run``) and every frame on its stack
# (``sys._current_frames()``), at each check's reset and again at its verify. Code is "library" when its file is
# under the standard library, site-packages or the ``ampcourse`` package; anything else (a notebook cell's code,
# ``exec``'d code) makes the check "cannot be graded". A thread whose code is all library code earns a note
# (torch.compile's workers, a DataLoader's, an open ThreadPoolExecutor waiting for work); one whose target is the
# kernel's or the course's own (these packages, or the file) earns nothing.
SILENT_THREAD_CODE = ("ipykernel", "IPython", "jupyter_client", "zmq", "tornado", "debugpy", "ampcourse",
                      "torch/utils/data/_utils/pin_memory.py")
# torch's core namespaces the checks use: their attributes are remembered before the first answer cell and put
# back before each check (with the MRO of each class, so an attribute set on a subclass to shadow a base is seen).
TORCH_NAMESPACES = ("torch", "torch.Tensor", "torch.nn", "torch.nn.Module", "torch.nn.Parameter",
                    "torch.nn.functional", "torch.amp", "torch.amp.autocast_mode", "torch.autocast",
                    "torch.amp.GradScaler", "torch.optim", "torch.optim.Optimizer", "torch.optim.SGD",
                    "torch.optim.AdamW", "torch.cuda", "torch.cuda.amp", "torch.finfo", "torch.dtype",
                    "torch.amp.grad_scaler")
# IPython's classes whose attributes decide a cell's reply: ipykernel sets the reply's status from
# ``ExecutionResult.success`` (ipykernel/ipkernel.py), so a property patched there turns every error into "ok".
IPYTHON_NAMESPACES = ("IPython.core.interactiveshell.ExecutionResult", "IPython.core.interactiveshell.ExecutionInfo",
                      # the modules a check cell's text passes through (review rev25-r4 E3: a module global
                      # ``compile`` in compilerop, the ``__code__`` of a cleanup transform replaced in place)
                      "IPython.core.compilerop", "IPython.core.inputtransformer2")
# Private names guarded as well, per namespace label (a prefix of the name): the checks' truth runs through them
# (lesson 04's real GradScaler calls ``torch._amp_foreach_non_finite_check_and_unscale_`` and
# ``torch._amp_update_scale_``, ``torch/amp/grad_scaler.py``); every private name of GradScaler and its module.
GUARDED_PRIVATE = {"torch": ("_amp_", "_foreach_"), "torch.amp.grad_scaler": ("_",),
                   "torch.amp.grad_scaler.GradScaler": ("_",)}
# Attributes torch itself adds to a guarded class (not a forgery): ``torch.compile`` runs dynamo's
# ``install_generation_tagging_init`` (``torch/_dynamo/mutation_guard.py``), which sets this flag on Module when it
# wraps ``Module.__init__``/``__setstate__`` (those wrappers are recognised by :func:`_torch_wrapper`).
TORCH_OWN_ATTRIBUTES = {"torch.nn.modules.module.Module": ("___needs_generation_tag_patch", "___needs_mutation_patch")}
# The wrappers torch itself installs over a guarded attribute: ``{attribute: (torch module, the function whose nested
# code the wrapper is)}`` (torch/_compile.py ``_disable_dynamo``, applied to ``torch.manual_seed`` by
# torch/_dynamo/__init__.py; torch/optim/optimizer.py ``Optimizer.profile_hook_step``, applied to each optimizer
# class's ``step`` by ``_patch_step_function``; torch/_dynamo/mutation_guard.py). Anything else is a change.
TORCH_WRAPPERS = {"manual_seed": ("torch._compile", "_disable_dynamo"),
                  "step": ("torch.optim.optimizer", "Optimizer.profile_hook_step"),
                  "__init__": ("torch._dynamo.mutation_guard", "install_generation_tagging_init"),
                  "__setstate__": ("torch._dynamo.mutation_guard", "install_generation_tagging_init"),
                  "__setattr__": ("torch._dynamo.mutation_guard", "ensure_patched")}
# Public module attributes that are lazy caches, None until first used (``tempfile.gettempdir()`` fills
# ``tempfile.tempdir``): filled since the snapshot, they are remembered from then on, not reported.
LAZY_CACHES = {"tempfile": ("tempdir",)}
# The key under which :func:`_function_dicts` keeps a function's ``__code__`` beside its ``__dict__`` (not a name)
CODE_KEY = " __code__"
# builtins that IPython itself rebinds between cells (the last results): not the grader's
VOLATILE_BUILTINS = ("_", "__", "___")
# Attributes torch's own public setters rebind, left out of the comparison (review rev25-r15 E1:
# ``torch.set_default_dtype(torch.float64)`` makes ``torch.Storage`` ``DoubleStorage``; each check's state reset,
# ampcourse.checks.state, sets the default dtype, and with it this attribute, for the check's duration). Nor is any
# namespace's ``__warningregistry__`` (the warnings module's own record of a warning attributed to a line of that
# module: ``torch.set_default_tensor_type``'s deprecation warning makes one in ``torch``; rev25-r16 M1).
SET_BY_TORCH = {"torch": ("Storage",)}
# builtins IPython's and ipykernel's traps install while a cell runs (and take out after it): not a change when the
# comparison runs inside the check cell (``ampcourse.checks.passed``)
CELL_BUILTINS = ("builtins.exit", "builtins.quit", "builtins.get_ipython", "builtins.input", "builtins.getpass")


def _namespaces() -> dict:
    """``{label: object}``: torch's core namespaces (:data:`TORCH_NAMESPACES`, each class with its MRO but
    ``object``), ``builtins``, and every module and class a loaded check module names at top level (``math``,
    ``numbers``, ``copy``, ``warnings``, ``statistics``, ``mock`` ...) that is not the course's own."""
    import builtins
    import importlib

    found = {"builtins": builtins}

    def add(label, obj):
        if isinstance(obj, type):
            for cls in obj.__mro__:
                if cls is not object:
                    found.setdefault(f"{cls.__module__}.{cls.__qualname__}", cls)
        elif isinstance(obj, type(sys)):
            found.setdefault(label, obj)

    for label in TORCH_NAMESPACES:
        head, _, attr = label.rpartition(".")
        try:
            obj = importlib.import_module(label)
        except ImportError:
            try:
                obj = getattr(importlib.import_module(head), attr)
            except (ImportError, AttributeError):
                continue
        add(label, obj)
    for label in IPYTHON_NAMESPACES:
        head, _, attr = label.rpartition(".")
        try:
            add(label, getattr(importlib.import_module(head), attr))
        except (ImportError, AttributeError):
            pass
    for name, module in list(sys.modules.items()):
        if name.startswith("ampcourse.checks.lesson") and module is not None:
            for value in list(vars(module).values()):
                owner = value.__module__ if isinstance(value, type) else getattr(value, "__name__", "")
                if isinstance(value, (type, type(sys))) and not str(owner).startswith("ampcourse"):
                    add(getattr(value, "__name__", repr(value)), value)
    return found


def _namespace_state() -> dict:
    """``{label: (object, dict of its attributes, {attribute: its function dicts})}`` for :func:`_namespaces`: of each
    attribute that is a Python function, the ``__dict__`` of it and of each function along its ``__wrapped__`` chain
    (:func:`_function_dicts`)."""
    found = {}
    for label, obj in _namespaces().items():
        attrs = dict(vars(obj))
        for name in SET_BY_TORCH.get(label, ()):
            attrs.pop(name, None)
        chains = {name: chain for name, value in attrs.items() if (chain := _function_dicts(value))}
        found[label] = (obj, attrs, chains)
    return found


def _function_dicts(value) -> list:
    """``[(function, copy of its __dict__)]`` for ``value`` (a function, or a static/class method's) and each function
    its ``__wrapped__`` chain leads to (review rev25-r4 E4: torch's ``_disable_dynamo`` wrapper dispatches through
    ``fn.__dynamo_disable``, an entry of the wrapped function's ``__dict__``)."""
    import types

    chain = []
    fn = getattr(value, "__func__", value)
    while isinstance(fn, types.FunctionType) and len(chain) < 8 and all(fn is not f for f, _ in chain):
        chain.append((fn, {**vars(fn), CODE_KEY: fn.__code__}))  # its code too (replaced in place: rev25-r4 E3)
        fn = vars(fn).get("__wrapped__")
    return chain


def _dynamo_disable(new, fn) -> bool:
    """Whether ``new`` is the ``__dynamo_disable`` torch's ``_disable_dynamo`` wrapper caches on ``fn`` at its first
    call (torch/_compile.py: ``torch._dynamo.disable(fn, recursive, wrapping=False)``): the ``_fn`` nested in
    ``DisableContext.__call__`` as compiled from torch/_dynamo/eval_frame.py, with that module's globals and a
    closure holding ``fn`` and a ``DisableContext`` only."""
    import os

    frame = sys.modules.get("torch._dynamo.eval_frame")
    code = getattr(new, "__code__", None)
    if frame is None or code is None or getattr(new, "__globals__", None) is not vars(frame):
        return False
    path = os.path.realpath(str(getattr(frame, "__file__", "")))
    if not code.co_qualname.startswith("DisableContext.__call__.<locals>.") or code not in _file_codes(path):
        return False
    cells = _closure_contents(new)
    if cells is None:
        return False
    return any(c is fn for c in cells) and all(c is fn or type(c) is frame.DisableContext for c in cells)


def _function_dict_changes(label: str, name: str, chain: list, restore: bool) -> list[str]:
    """What differs in the ``__dict__`` of each function of ``chain`` (:func:`_function_dicts`); with ``restore``, put
    it back. Not a change: torch's own ``__dynamo_disable`` (:func:`_dynamo_disable`), remembered from then on."""
    changed = []
    for depth, (fn, saved) in enumerate(chain):
        if fn.__code__ is not saved.get(CODE_KEY, fn.__code__):
            changed.append(f"{label}.{name}{'.__wrapped__' * depth}.__code__")
            if restore:
                fn.__code__ = saved[CODE_KEY]
        now = vars(fn)
        for key in sorted((set(saved) | set(now)) - {CODE_KEY}):
            if key in saved and key in now and now[key] is saved[key]:
                continue
            if key == "__dynamo_disable" and key in now and _dynamo_disable(now[key], fn):
                saved[key] = now[key]
                continue
            changed.append(f"{label}.{name}{'.__wrapped__' * depth}.{key}")
            if restore:
                if key in saved:
                    now[key] = saved[key]
                else:
                    del now[key]
    return changed


def _file_codes(path: str) -> set:
    """Every code object (nested ones too) compiled from the source file ``path`` as it is on disk (cached), or an
    empty set where it cannot be read. A code object equal to one of these is that file's code whatever its
    ``co_filename`` claims (``code.replace(co_filename=...)`` keeps its own bytecode); a frozen module's code
    (``<frozen importlib._bootstrap>``) is compared with the standard library's file of that name."""
    import os
    import sysconfig

    cache = _GUARD.setdefault("file codes", {})
    if path in cache:
        return cache[path]
    found: set = set()
    source_path = path
    if path.startswith("<frozen ") and path.endswith(">"):
        source_path = os.path.join(sysconfig.get_paths()["stdlib"], *path[8:-1].split(".")) + ".py"
    try:
        with open(source_path, "rb") as handle:
            top = compile(handle.read(), path, "exec", dont_inherit=True)
    except (OSError, SyntaxError, ValueError):
        top = None
    todo = [top] if top is not None else []
    while todo:
        code = todo.pop()
        found.add(code)
        todo += [c for c in code.co_consts if isinstance(c, type(code))]
    cache[path] = found
    return found


def _torch_wrapper(new, old, name: str = "") -> bool:
    """Whether ``new`` is torch's own wrapper of ``old``, installed as attribute ``name``: torch wraps some of its
    functions when first used (:data:`TORCH_WRAPPERS`: ``import torch._dynamo`` wraps ``torch.manual_seed``; the
    first optimizer of a class wraps its ``step``; ``torch.compile`` wraps ``Module.__init__``/``__setstate__``).
    Only those are accepted, by what they are, never by what they claim (review rev25-r3 E7: a replacement given
    torch's file name and ``__wrapped__``): the wrapper's code must be the code nested in that torch function as
    compiled from torch's file (:func:`_file_codes`), its globals that module's, and its closure hold ``old`` and
    otherwise plain flags only."""
    import os

    import torch

    fn = getattr(new, "__func__", new)
    code = getattr(fn, "__code__", None)
    where = TORCH_WRAPPERS.get(name)
    if old is None or code is None or where is None or not isinstance(getattr(fn, "__globals__", None), dict):
        return False
    module_name, factory = where
    module = sys.modules.get(module_name)
    if module is None or fn.__globals__ is not vars(module):
        return False
    path = os.path.join(os.path.dirname(os.path.realpath(torch.__file__)), *module_name.split(".")[1:]) + ".py"
    if os.path.realpath(str(getattr(module, "__file__", ""))) != path:
        return False
    if not code.co_qualname.startswith(factory + ".<locals>.") or code not in _file_codes(path):
        return False
    cells = _closure_contents(fn)
    if cells is None:
        return False
    wraps_old = [c is old or getattr(c, "__func__", None) is old for c in cells]
    plain = [c is None or type(c) in (bool, int, str) for c in cells]
    return any(wraps_old) and all(w or p for w, p in zip(wraps_old, plain, strict=True))


def _namespace_changes(restore: bool) -> list[str]:
    """What differs from the remembered namespaces (a changed, deleted or added attribute); with ``restore``, put
    each back as it was. Not a change: a submodule imported since, torch's own wrapper of a function
    (:func:`_torch_wrapper`, remembered from then on), a private name (one leading underscore: a module's lazy cache
    such as ``tempfile._name_sequence``) outside ``builtins``, and ``__slotnames__`` (``copy``'s cache on a class)."""
    changed = []
    for label, (obj, saved, chains) in _GUARD["namespaces"].items():
        now = vars(obj)
        names = (set(saved) | set(now)) - set(SET_BY_TORCH.get(label, ())) - {"__warningregistry__"}
        for name in names:
            if label == "builtins" and name in VOLATILE_BUILTINS:
                continue
            if name in saved and name in now and now[name] is saved[name]:
                if name in chains:  # the same function: its __dict__ and its __wrapped__'s too (rev25-r4 E4)
                    changed += _function_dict_changes(label, name, chains[name], restore)
                continue
            private = label != "builtins" and name.startswith("_") and not name.startswith("__")
            if name == "__slotnames__" or (private and not name.startswith(GUARDED_PRIVATE.get(label, ()) or "\0")):
                continue
            if name in LAZY_CACHES.get(label, ()) and saved.get(name) is None and name in now:
                saved[name] = now[name]
                continue
            if name not in saved and name in TORCH_OWN_ATTRIBUTES.get(label, ()) and type(now[name]) is bool:
                saved[name] = now[name]
                continue
            if name not in saved and isinstance(now[name], type(sys)):
                continue  # a submodule imported since
            old = saved.get(name)
            if old is None and isinstance(obj, type):  # torch wraps an inherited method on the subclass
                old = next((vars(cls)[name] for cls in obj.__mro__[1:] if name in vars(cls)), None)
            if name in now and _torch_wrapper(now[name], old, name):
                saved[name] = now[name]
                continue
            changed.append(f"{label}.{name}")
            if restore:
                try:
                    if name in saved:
                        setattr(obj, name, saved[name])
                    else:
                        delattr(obj, name)
                except (AttributeError, TypeError):
                    pass
    return sorted(changed)


def _code_roots() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(library, silent)``: the folders (and files) whose code is library code, and the kernel's and the course's
    own (:data:`SILENT_THREAD_CODE`)."""
    import importlib.util
    import os
    import sysconfig

    import torch

    library = {os.path.realpath(sysconfig.get_paths()[k]) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    silent = set()
    for name in SILENT_THREAD_CODE:
        if name.endswith(".py"):
            silent.add(os.path.join(os.path.dirname(os.path.realpath(torch.__file__)), *name.split("/")[1:]))
            continue
        spec = importlib.util.find_spec(name)
        for folder in (spec.submodule_search_locations or []) if spec is not None else []:
            silent.add(os.path.realpath(folder))
    library |= silent
    return tuple(sorted(library)), tuple(sorted(silent))


def _thread_code(thread=None, function=None, args=(), kwargs=None, target=None, stack=()) -> tuple[str, str]:
    """``(kind, what)`` for a thread (a ``threading.Thread``, alive or finished) or for a ``function`` started with
    ``args``/``kwargs`` by ``_thread.start_new_thread``: kind "cell" (code outside the library: ``what`` names it),
    "library" (only library code), or "silent" (library code, and its target is the kernel's or the course's own).
    ``target``: a ``Thread``'s ``(_target, _args, _kwargs)`` as they were when it started (``Thread.run`` deletes
    them when it ends). ``stack``: more ``(code, globals)`` pairs to judge (where a thread was started from).

    Library code is judged by what it is, not by the file it claims (review rev25-r3 E4: ``_w.__code__ =
    _w.__code__.replace(co_filename=threading.__file__)``): its file must be under the standard library,
    site-packages or the course's packages, and the code must be one compiled from that file as it is on disk
    (:func:`_file_codes`)."""
    import functools
    import os
    import threading

    library, silent = _GUARD.get("roots") or _code_roots()

    def under(filename, roots):
        path = os.path.realpath(filename)
        return any(path == root or path.startswith(root + os.sep) for root in roots)

    def real(code, roots):
        if (_GUARD.get("own codes") or {}).get(id(code)) is code:
            return True  # the guard's thread-start recorder, on the stack of a thread starting another
        frozen = code.co_filename.startswith("<frozen ")
        return (frozen or under(code.co_filename, roots)) and code in _file_codes(code.co_filename)

    def function_of(fn):
        for _ in range(5):
            if isinstance(fn, functools.partial):
                fn = fn.func
            fn = getattr(fn, "__func__", fn)
        return fn

    def own_globals(code, space):
        """The globals a library code object runs with are its own module's (review rev25-r4 E2: threading's own
        ``_newname`` code made into a function with the answer's globals)."""
        module = sys.modules.get(space.get("__name__")) if isinstance(space, dict) else None
        if module is None or vars(module) is not space:
            return False
        if code.co_filename.startswith("<frozen "):
            return True
        return os.path.realpath(str(getattr(module, "__file__", "") or "")) == os.path.realpath(code.co_filename)

    targets = []
    if thread is None:
        bound = getattr(function, "__self__", None)
        if isinstance(bound, threading.Thread) and getattr(function, "__name__", "") == "_bootstrap":
            thread = bound  # threading.Thread.start: judged as that thread
        else:
            targets += [function, *args, *(kwargs or {}).values()]
    if thread is not None:
        cls = type(thread)
        if isinstance(thread, threading.Timer) and cls.run is threading.Timer.run:
            targets += [thread.function, *thread.args, *thread.kwargs.values()]
        elif cls.run is threading.Thread.run:
            fn, fn_args, fn_kwargs = target or (getattr(thread, "_target", None), getattr(thread, "_args", ()),
                                                getattr(thread, "_kwargs", None))
            targets += [fn, *(fn_args or ()), *(fn_kwargs or {}).values()]
        else:
            targets.append(cls.run)
    functions = [function_of(t) for t in targets if callable(t)]
    pairs = [(f.__code__, getattr(f, "__globals__", None)) for f in functions if getattr(f, "__code__", None)]
    codes = [code for code, _ in pairs]
    pairs += list(stack)
    frame = sys._current_frames().get(thread.ident) if thread is not None else None
    while frame is not None:
        pairs.append((frame.f_code, frame.f_globals))
        frame = frame.f_back
    for code, space in pairs:
        if not real(code, library):
            claimed = os.path.basename(code.co_filename)
            library_name = claimed if under(code.co_filename, library) else ""
            return "cell", (f"{code.co_name} (code claiming {library_name}, not that file's)" if library_name else
                            f"{code.co_name} in {claimed}")
        if (_GUARD.get("own codes") or {}).get(id(code)) is not code and not own_globals(code, space):
            return "cell", (f"{code.co_name} (code of {os.path.basename(code.co_filename)} run with other "
                            "globals)")
    if codes and under(codes[0].co_filename, silent):
        return "silent", ""
    return "library", ""


def _thread_starter(original, starts: list):
    """A stand-in for ``_thread.start_new_thread`` (and ``threading._start_new_thread``) that notes each thread
    started, with when it started and (it runs the thread's function inside a wrapper) when it ended, so that one
    started and finished during a check is judged too (review rev25-r3 E5; :func:`guard_hazards`)."""
    import time

    def start_new_thread(function, *args, **kwargs):
        owner = getattr(function, "__self__", None)  # threading.Thread.start passes the thread's _bootstrap
        target = tuple(getattr(owner, name, None) for name in ("_target", "_args", "_kwargs"))
        entry = [function, args[0] if args else (), args[1] if len(args) > 1 else None, target, time.monotonic(),
                 None, []]
        frame = sys._getframe(1)  # where it was started from, up to the first course frame (the check calling)
        while frame is not None and "ampcourse" not in frame.f_globals.get("__name__", "").split(".")[:1]:
            entry[6].append((frame.f_code, frame.f_globals))
            frame = frame.f_back
        if frame is None:
            entry[6].clear()  # not started under a check's call: judged by its target only
        starts.append(entry)

        def run(*a, **k):
            try:
                return function(*a, **k)
            finally:
                entry[5] = time.monotonic()

        return original(run, *args, **kwargs)

    start_new_thread.ampcourse_original = original
    return start_new_thread


def guard_hazards(notes: bool = True) -> list[str]:
    """What an answer left running that could alter the grader while a check runs: a Python thread started after
    the guard was installed that runs, or is set to run, code of the learner's cells (:func:`_thread_code`: a
    frame or a target outside the library), a thread started with ``_thread`` (invisible to ``threading``), a
    trace or profile function (``sys.settrace``/``setprofile``, ``threading.settrace``/``setprofile``), an audit
    hook added since (``sys.addaudithook``: seen by the grader's own audit hook), a course module value the reset
    could not put back. With ``notes``, also each thread running library code only (:data:`RUNNING_THREAD`),
    which only earns a note."""
    import _thread
    import threading

    found = []
    main = threading.main_thread()
    for thread in threading.enumerate():
        if thread is main or thread.ident in _GUARD["threads"] or not thread.is_alive():
            continue
        kind, what = ("cell", "a dummy thread") if isinstance(thread, threading._DummyThread) else \
            _thread_code(thread)
        if kind == "cell":
            found.append(f"{CELL_THREAD}{thread.name}: {what})")
        elif kind == "library" and notes:
            found.append(f"{RUNNING_THREAD}{thread.name}, running library code only)")
    visible = sum(1 for t in threading.enumerate() if t is not main and not isinstance(t, threading._DummyThread))
    if _thread._count() - visible > _GUARD["hidden threads"]:
        found.append("a thread started with _thread.start_new_thread")
    for what, now in (("sys.settrace", sys.gettrace()), ("sys.setprofile", sys.getprofile()),
                      ("threading.settrace", threading.gettrace()),
                      ("threading.setprofile", threading.getprofile())):
        if now is not _GUARD["hooks"].get(what):
            found.append(f"a {what} hook")
    if _GUARD["audit"]:
        found.append("an audit hook (sys.addaudithook)")
    found += _code_without_a_thread()
    found += [f"{LEFT_VALUE}{what})" for what in _GUARD.get("left", [])]
    if not notes:  # at the verify: every thread started while the check ran, finished or not
        calls = list((_GUARD.get("run") or {}).get("calls") or ())
        for function, args, kwargs, target, started, ended, *origin in list(_GUARD.get("starts", [])):
            thread = getattr(function, "__self__", None)
            # A thread your function started and that ended (joined or finished) before it returned is its own work
            # (the check called it through ampcourse.checks.call/noted_call, which note when each call began and ended).
            if ended is not None and any(began <= started and ended <= done for began, done in calls):
                continue
            name = thread.name if isinstance(thread, threading.Thread) else "started with _thread"
            alive = isinstance(thread, threading.Thread) and thread.is_alive()
            if not alive:  # alive: judged above, with its stack
                kind, what = _thread_code(function=function, args=args, kwargs=kwargs, target=target)
                if kind == "cell":
                    found.append(f"{CELL_THREAD}{name}: {what}{STARTED_IN_CHECK}")
                    continue
            # Library code only, started from the answer's code while the check ran (a ThreadPoolExecutor's worker:
            # what it is handed is not seen; review rev25-r4 E2): a note, never nothing.
            kind, what = _thread_code(stack=origin[0] if origin else ())
            if kind == "cell":
                found.append(f"{STARTED_NOTE}{name}, from {what})")
        for owner, attr in _thread_entry_points():
            if getattr(owner, attr, None) is not (_GUARD.get("starters") or {}).get((owner.__name__, attr)):
                found.append(f"{LEFT_VALUE}{owner.__name__}.{attr})")
    return list(dict.fromkeys(found))


def _mode_stacks() -> dict:
    """torch's function and dispatch mode stacks as they are now (``[]`` each when torch is not loaded), without the
    ``DeviceContext`` that ``torch.set_default_device`` pushes (each check's state reset takes it out)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return {"function": [], "dispatch": []}
    from torch.utils._device import DeviceContext

    function = [m for m in (torch._C._get_function_stack_at(i) for i in range(torch._C._len_torch_function_stack()))
                if type(m) is not DeviceContext]
    dispatch = [torch._C._get_dispatch_stack_at(i) for i in range(torch._C._len_torch_dispatch_stack())]
    return {"function": function, "dispatch": dispatch}


def _signal_state() -> tuple[dict, dict]:
    """``({signal number: its Python handler}, {timer name: signal.getitimer(timer)})`` now: every signal whose
    handler Python can read (SIGINT left out, ipykernel sets its own around each request), and the three interval
    timers."""
    import signal

    handlers = {}
    for number in signal.valid_signals():
        if number == signal.SIGINT:
            continue
        try:
            handlers[int(number)] = signal.getsignal(number)
        except (ValueError, OSError):  # pragma: no cover - a number the platform lists but cannot read
            continue
    timers = {name: signal.getitimer(getattr(signal, name)) for name in ("ITIMER_REAL", "ITIMER_VIRTUAL", "ITIMER_PROF")
              if hasattr(signal, name)}
    return handlers, timers


def _code_without_a_thread() -> list[str]:
    """What runs code of the answer's inside a check without a thread (review rev25-r6 E5): a ``gc.callbacks`` entry
    added since the guard was installed (with ``gc.set_threshold(1, ...)`` a callback runs at nearly every
    allocation, and can walk the check's frames), a changed gc threshold, and a torch function or dispatch mode left
    entered (``TorchFunctionMode().__enter__()`` stays on across cells: every torch call the check makes runs
    through it), a signal handler of the learner's code (``signal.signal``: a ``SIGALRM`` handler with
    ``signal.setitimer`` runs between any two bytecodes of the check, with its frame) and an interval timer started
    since (review rev25-r7 W1). Not covered: finalizers (``__del__``, ``weakref.finalize``) of the answer's garbage
    other than what ``checks.keep`` holds until the verify,
    and methods of the answer's objects a check itself calls (a ``__deepcopy__`` on a model it copies)."""
    import gc

    found = []
    saved = _GUARD.get("gc") or ([], gc.get_threshold())
    if [id(c) for c in gc.callbacks] != [id(c) for c in saved[0]]:
        found.append("a gc callback (gc.callbacks)")
    if gc.get_threshold() != saved[1]:
        found.append(f"a gc threshold of {gc.get_threshold()} (gc.set_threshold){IN_EFFECT}")
    modes, before = _mode_stacks(), _GUARD.get("modes") or {"function": [], "dispatch": []}
    for kind, label in (("function", "TorchFunctionMode"), ("dispatch", "TorchDispatchMode")):
        if [id(m) for m in modes[kind]] != [id(m) for m in before[kind]]:
            names = ", ".join(type(m).__name__ for m in modes[kind]) or "none"
            found.append(f"a torch {kind} mode ({label}: {names}){IN_EFFECT}")
    import signal

    handlers, timers = _signal_state()
    saved_handlers, saved_timers = _GUARD.get("signals") or (handlers, timers)
    for number, handler in handlers.items():  # review rev25-r7 W1: a SIGALRM handler runs inside every judgement
        if handler is not saved_handlers.get(number, handler) and callable(handler) \
                and _thread_code(function=handler)[0] == "cell":
            found.append(f"a signal handler for {signal.Signals(number).name} (signal.signal){IN_EFFECT}")
    for name, now in timers.items():
        if now != (0.0, 0.0) and saved_timers.get(name) == (0.0, 0.0):
            found.append(f"an interval timer ({name}, signal.setitimer){IN_EFFECT}")
    return found


def _thread_entry_points() -> list:
    """``(module, name)`` of each function that starts a thread: the guard notes its calls (:func:`_thread_starter`)."""
    import _thread
    import threading

    found = [(threading, "_start_new_thread"), (_thread, "start_new_thread"), (_thread, "start_new")]
    return [(owner, attr) for owner, attr in found if hasattr(owner, attr)]  # start_new: an old alias


def guard_install(shell, modules: dict[str, str]) -> str:
    """In the kernel, before any learner cell: remember the shell's transformers, event callbacks and methods,
    the course's modules and their functions, and the check modules (``{name bound in the check cells:
    module}``), imported now, with the files they came from."""
    import importlib

    _GUARD.clear()
    _GUARD["manager"] = shell.input_transformer_manager
    _GUARD["lists"] = {(id(owner), attr): list(getattr(owner, attr))
                       for group in _transformer_lists(shell).values() for owner, attr in group}
    _GUARD["events"] = {name: list(callbacks) for name, callbacks in shell.events.callbacks.items()}
    _GUARD["modules"] = {name: importlib.import_module(f"ampcourse.checks.{module}")
                         for name, module in modules.items()}
    _GUARD["files"] = {name: module.__file__ for name, module in _GUARD["modules"].items()}
    _GUARD["path"] = list(sys.modules["ampcourse.checks"].__path__)
    _GUARD["course"] = _course_modules()
    _GUARD["left"] = []
    _GUARD["roots"] = _code_roots()
    _GUARD["slots"] = _method_slots(shell)
    _GUARD["namespaces"] = _namespace_state()
    import _thread
    import threading

    main = threading.main_thread()
    _GUARD["threads"] = {t.ident for t in threading.enumerate()}
    _GUARD["hidden threads"] = _thread._count() - sum(
        1 for t in threading.enumerate() if t is not main and not isinstance(t, threading._DummyThread))
    _GUARD["hooks"] = {"sys.settrace": sys.gettrace(), "sys.setprofile": sys.getprofile(),
                       "threading.settrace": threading.gettrace(), "threading.setprofile": threading.getprofile()}
    import gc

    _GUARD["gc"] = (list(gc.callbacks), gc.get_threshold())
    _GUARD["modes"] = _mode_stacks()
    _GUARD["signals"] = _signal_state()
    state = vars(sys.modules["_ampcourse_grader_guard"])
    state["audit"] = _GUARD["audit"] = state.get("audit", [])
    if not state.get("audit hook"):  # audit hooks cannot be removed: one per kernel, noting each hook added later
        audit = _GUARD["audit"]
        sys.addaudithook(lambda event, args: event == "sys.addaudithook" and audit.append(event))
        state["audit hook"] = True
    _GUARD["audit"].clear()
    starts = _GUARD["starts"] = []
    _GUARD["starters"] = {}
    for owner, attr in _thread_entry_points():
        current = getattr(owner, attr)
        starter = _thread_starter(getattr(current, "ampcourse_original", current), starts)
        setattr(owner, attr, starter)
        _GUARD["starters"][(owner.__name__, attr)] = starter
    own = [starter.__code__ for starter in _GUARD["starters"].values()]
    own += [c for code in own for c in code.co_consts if isinstance(c, type(code))]  # its `run` wrapper
    _GUARD["own codes"] = {id(code): code for code in own}
    _GUARD["run"] = {}
    return "installed"


def _check_codes(module) -> dict:
    """``{id: code}`` of every function (nested ones too) of check module ``module``: the code that may record a
    pass (:func:`ampcourse.checks.passed`; :func:`guard_verify` requires such a record)."""
    codes, todo = {}, []
    for value in list(vars(module).values()):
        members = list(vars(value).values()) if isinstance(value, type) and value.__module__ == module.__name__ \
            else [value]
        for member in members:
            member = getattr(member, "__func__", member)
            if getattr(member, "__globals__", None) is vars(module):
                todo.append(member.__code__)
    while todo:
        code = todo.pop()
        if id(code) not in codes:
            codes[id(code)] = code
            todo += [c for c in code.co_consts if isinstance(c, type(code))]
    return codes


def _from_a_cell(obj) -> bool:
    """Whether ``obj`` (a transformer, a callback) was defined in a notebook cell (module ``__main__``)."""
    module = getattr(obj, "__module__", None) or getattr(type(obj), "__module__", None)
    return module in (None, "__main__") or str(module).startswith("__main__")


def _undo(current: list, saved: list) -> bool:
    """Remove from ``current`` what a cell added and put back what was removed (libraries, such as matplotlib's
    inline backend registering a callback, may add their own: those stay). True when something was undone."""
    added = [x for x in current if x not in saved and _from_a_cell(x)]
    missing = [x for x in saved if x not in current]
    if added or missing:
        current[:] = [x for x in saved] + [x for x in current if x not in saved and x not in added]
    return bool(added or missing)


def guard_reset(shell) -> list[str]:
    """In the kernel, right before a check: undo every change to the grader's state; return what was undone."""
    import importlib.util

    kept = (_GUARD.get("run") or {}).get("kept")
    if isinstance(kept, list):  # the last check's objects, if no verify let them go: before anything is put back
        kept.clear()
    undone = []
    if shell.input_transformer_manager is not _GUARD["manager"]:
        shell.input_transformer_manager = _GUARD["manager"]
        undone.append("input transformers")
    for what, group in _transformer_lists(shell).items():
        for owner, attr in group:
            saved = _GUARD["lists"].get((id(owner), attr))
            if saved is not None and _undo(getattr(owner, attr), saved):
                undone.append(what)
    for name, callbacks in shell.events.callbacks.items():
        if _undo(callbacks, _GUARD["events"].get(name, [])):
            undone.append(f"IPython '{name}' callbacks")
    objects = _guarded_objects(shell)
    for (where, name, slot), value in _GUARD["slots"].items():
        owner = objects.get(where) if slot == "instance" else slot
        if owner is None or (slot == "instance" and not hasattr(owner, "__dict__")):
            continue
        now = (vars(owner) if slot == "instance" else owner.__dict__).get(name, None)
        if now is not value:
            if value is None:
                delattr(owner, name)
            else:
                setattr(owner, name, value)
            undone.append(f"{where}.{name}")
    package = sys.modules["ampcourse.checks"]
    if list(package.__path__) != _GUARD["path"]:
        package.__path__[:] = _GUARD["path"]
        undone.append("ampcourse.checks.__path__")
    undone += _course_changes(_GUARD["course"], restore=True)
    _GUARD["left"] = sorted(set(_course_changes(_GUARD["course"], restore=False)))
    for name, module in _GUARD["modules"].items():
        short = module.__name__.rsplit(".", 1)[1]
        if getattr(package, short, None) is not module:
            undone.append(f"the check module {module.__name__}")
        setattr(package, short, module)
        # Run the course's own file again (not whatever the import system would find first now).
        spec = importlib.util.spec_from_file_location(module.__name__, _GUARD["files"][name])
        module.__spec__, module.__loader__ = spec, spec.loader
        spec.loader.exec_module(module)
        _GUARD["course"][module.__name__] = _module_entry(module)
        if name in shell.user_ns and shell.user_ns[name] is not module:
            undone.append(f"the name `{name}`")
        shell.user_ns[name] = module
    checks = [u for u in undone if u.startswith("ampcourse.checks.lesson") and " " not in u]
    for u in checks:  # one line per patched check module, not one per function
        undone[undone.index(u)] = f"the check module {u.rsplit('.', 1)[0]}"
    undone += _namespace_changes(restore=True)
    for owner, attr in _thread_entry_points():
        starter = _GUARD["starters"].get((owner.__name__, attr))
        if starter is not None and getattr(owner, attr, None) is not starter:
            setattr(owner, attr, starter)
            undone.append(f"{owner.__name__}.{attr}")
    _GUARD["starts"].clear()
    _GUARD["check codes"] = {}
    for module in _GUARD["modules"].values():
        _GUARD["check codes"].update(_check_codes(module))
    import secrets

    _GUARD["run"] = {"nonce": secrets.token_hex(16), "ran": [], "calls": [], "early": [],
                     # what the check handed the answer and got back (checks.keep), alive until the verify lets it
                     # go before its comparison: a finalizer hung on it runs where that comparison sees it (rev25-r9 E3)
                     "kept": [],
                     # the trace/profile hooks the guard recorded: checks.answer_of compares with these, never with
                     # a local a trace function could rewrite (review rev25-r8 E2)
                     "hooks": tuple(_GUARD.get("hooks", {}).get(f"sys.{h}") for h in ("settrace", "setprofile")),
                     # ampcourse.checks.passed calls this before it prints (review rev25-r4 E1): a change undone
                     # after the check's last judgement (by code left in sys.stdout, a display hook, a thread) is
                     # seen there
                     "compare": lambda: _course_changes(_GUARD["checked"], restore=False) + [
                         c for c in _namespace_changes(False) if c not in CELL_BUILTINS]}
    _GUARD["checked"] = _course_modules()
    return list(dict.fromkeys(undone)), guard_hazards()


def guard_verify(shell) -> tuple[list[str], list[str], list[str]]:
    """In the kernel, right after a check: ``(changes, hazards, ran)``: what changed in the grader's state while it ran
    (the course's modules and check modules with their functions' code and their tables' values, the name bound to
    each check module, torch's core namespaces, IPython's reply classes and the builtins), and what is running now
    that could have altered it (:func:`guard_hazards` without the notes, and every thread started while it ran), and
    the tasks whose pass the course's own check recorded since the reset (``ampcourse.checks.passed`` notes the
    reset's nonce, the task and the calling frame's code and globals: only a function of a guarded check module,
    re-executed at the reset, counts; :func:`output_problem` requires the record). A change means the check that
    ran was not the course's own; a hazard, that it cannot be told: either way its result does not count. The objects
    the check kept alive (``checks.keep``) are let go first, so that what their finalizers do is compared too."""
    kept = (_GUARD.get("run") or {}).get("kept")
    if isinstance(kept, list):
        kept.clear()
    changed = _course_changes(_GUARD["checked"], restore=False)
    objects = _guarded_objects(shell)
    for (where, name, slot), value in _GUARD["slots"].items():  # the shell's methods: set_custom_exc in the check
        owner = objects.get(where) if slot == "instance" else slot
        if owner is None or (slot == "instance" and not hasattr(owner, "__dict__")):
            continue
        if (vars(owner) if slot == "instance" else owner.__dict__).get(name, None) is not value:
            changed.append(f"{where}.{name}")
    for name, module in _GUARD["modules"].items():
        if shell.user_ns.get(name) is not module:
            changed.append(f"the name `{name}`")
    changed += _namespace_changes(restore=False)
    run, codes = _GUARD.get("run") or {}, _GUARD.get("check codes") or {}
    changed += [str(c) for c in (run.get("early") or ()) if isinstance(c, str)]  # seen by passed(), before it printed
    spaces = [vars(module) for module in _GUARD["modules"].values()]
    ran = []
    for entry in list(run.get("ran") or ()):
        if not (isinstance(entry, tuple) and len(entry) == 4):
            continue
        nonce, task, code, space = entry
        if (nonce == run.get("nonce") and isinstance(task, str) and codes.get(id(code)) is code
                and any(space is s for s in spaces)):
            ran.append(str.__str__(task))
    return list(dict.fromkeys(changed)), guard_hazards(notes=False), ran


_KERNEL_SIDE = (_transformer_lists, _guarded_objects, _method_slots, _plain_copy, _same, _function_state, _cell_filled,
                _closure_contents,
                _module_entry, _member_state, _class_state, _restore_function, _class_changes, _course_modules,
                _put_back, _course_changes, _namespaces, _namespace_state, _function_dicts, _dynamo_disable,
                _function_dict_changes, _file_codes, _torch_wrapper,
                _namespace_changes, _code_roots, _thread_code, _thread_starter, _mode_stacks, _signal_state,
                _code_without_a_thread,
                _thread_entry_points, guard_hazards,
                guard_install, _check_codes, _from_a_cell, _undo, guard_reset, guard_verify)
_KERNEL_CODE: list[str] = []


def guard_expression(call: str, nonce: str) -> str:
    """A ``user_expressions`` entry that defines the guard functions afresh in the kernel, from this process's
    source, and evaluates ``call`` (``"guard_install(shell, {...})"`` or ``"guard_reset(shell)"``). Their state
    lives in the kernel between calls (``sys.modules['_ampcourse_grader_guard']``). The value is
    ``(sha256 of nonce, result)``: a reply without it (an answer cell replaced the shell's ``user_expressions``,
    say) did not come from the guard (:func:`guard_value`)."""
    import inspect

    if not _KERNEL_CODE:
        _KERNEL_CODE.append("\n".join(
            ["import sys, types",
             "_GUARD = vars(sys.modules.setdefault('_ampcourse_grader_guard', "
             "types.ModuleType('_ampcourse_grader_guard'))).setdefault('state', {})",
             f"GUARDED_METHODS = {GUARDED_METHODS!r}", f"SILENT_THREAD_CODE = {SILENT_THREAD_CODE!r}",
             f"RUNNING_THREAD = {RUNNING_THREAD!r}", f"CELL_THREAD = {CELL_THREAD!r}", f"LEFT_VALUE = {LEFT_VALUE!r}",
             f"STARTED_IN_CHECK = {STARTED_IN_CHECK!r}", f"STARTED_NOTE = {STARTED_NOTE!r}",
             f"IN_EFFECT = {IN_EFFECT!r}",
             f"IPYTHON_NAMESPACES = {IPYTHON_NAMESPACES!r}", f"TORCH_OWN_ATTRIBUTES = {TORCH_OWN_ATTRIBUTES!r}",
             f"TORCH_WRAPPERS = {TORCH_WRAPPERS!r}",
             f"GUARDED_PRIVATE = {GUARDED_PRIVATE!r}", f"LAZY_CACHES = {LAZY_CACHES!r}",
             f"TORCH_NAMESPACES = {TORCH_NAMESPACES!r}", f"VOLATILE_BUILTINS = {VOLATILE_BUILTINS!r}",
             f"SET_BY_TORCH = {SET_BY_TORCH!r}",
             f"CELL_BUILTINS = {CELL_BUILTINS!r}", f"CODE_KEY = {CODE_KEY!r}"]
            + [inspect.getsource(f) for f in _KERNEL_SIDE]))
    code = _KERNEL_CODE[0] + f"\n_result = (__import__('hashlib').sha256(_nonce.encode()).hexdigest(), {call})\n"
    return (f"(lambda ns: (__import__('builtins').exec({code!r}, ns), ns['_result'])[1])"
            f"({{'shell': __import__('IPython').get_ipython(), '_nonce': {nonce!r}}})")


def guard_value(reply: dict, nonce: str):
    """The guard's result from its ``user_expressions`` reply entry, or None when the guard did not run (an
    error) or the reply is not its own (the nonce's digest is missing)."""
    import ast
    import hashlib

    if reply.get("status") != "ok":
        return None
    try:
        digest, value = ast.literal_eval(reply.get("data", {}).get("text/plain", "None"))
    except (ValueError, SyntaxError, TypeError):
        return None
    return value if digest == hashlib.sha256(nonce.encode()).hexdigest() else None


def new_nonce() -> str:
    import secrets

    return secrets.token_hex(16)


def _guard_modules(template) -> dict[str, str]:
    """``{name: lessonNN}``: each check module the exercise imports and the name it binds, from *every* code cell of
    the template (exercise 08 imports its check module in an ordinary cell, not a check cell), written
    ``from ampcourse.checks import lessonNN as name`` or ``import ampcourse.checks.lessonNN as name``."""
    found: dict[str, str] = {}
    for cell in template.cells:
        if cell.cell_type == "code":
            for module, name in CHECK_IMPORT.findall(cell.source):
                found[name] = module
            for module, name in CHECK_IMPORT_DOTTED.findall(cell.source):
                found[name] = module
    return found


# --- the check cells a learner's notebook should hold ---------------------------------------------------

RESTORE = ("Restore it: `python -m ampcourse build` puts the course's check cells back into exercises/ and keeps "
           "your answers (a backup goes to exercises/.backup/)")


@dataclass
class CheckCellProblem:
    """A task whose check cell is not the one the course made: ``what`` happened to it."""

    task: str
    what: str  # "was deleted", "was emptied", "was edited", "is marked `# NBVAL_SKIP` ...", ...

    def message(self) -> str:
        return (f"{self.task}: its check cell {self.what}, so this task's check did not count. {RESTORE}.")


def _nbval_markers(cell) -> list[str]:
    """The nbval markers on ``cell`` that stop its error from failing the run (skip it, or expect it to raise),
    read with nbval's own tables, so exactly what nbval honours."""
    from nbval.plugin import comment_markers, metadata_tags

    def silences(marker) -> bool:
        option, on = marker if isinstance(marker, tuple) else (marker, True)
        return on and option in ("skip", "check_exception")

    found = [f"`{line.strip()}`" for line in cell.source.splitlines() if line.strip().startswith("#")
             and silences(comment_markers.get(line.strip().lstrip("#").strip(), ("", False)))]
    found += [f"the tag `{tag}`" for tag in tags(cell) if silences(metadata_tags.get(tag, ("", False)))]
    return found


def check_cell_problems(learner, template) -> list[CheckCellProblem]:
    """Each check cell of ``template`` (the exercise as generated) that ``learner`` does not hold as it is.

    A learner cell is matched to a check cell by identical source, else by its cell id (JupyterLab keeps
    ids). A check cell is fine when it is still a code cell tagged ``check`` with the same source and no
    nbval marker that skips it or expects it to raise.
    """
    by_id = {cell.get("id"): cell for cell in learner.cells if cell.get("id")}
    used: set[int] = set()
    problems = []
    for index, check in enumerate(template.cells):
        if "check" not in tags(check):
            continue
        task = task_title(template.cells, index)
        mine = next((c for c in learner.cells if id(c) not in used and c.cell_type == "code"
                     and c.source == check.source), None)
        if mine is None and check.get("id") and id(by_id.get(check.get("id"))) not in used:
            mine = by_id.get(check.get("id"))
        if mine is None:
            problems.append(CheckCellProblem(task, "was deleted"))
            continue
        used.add(id(mine))
        markers = _nbval_markers(mine) if mine.cell_type == "code" else []
        if mine.cell_type != "code":
            problems.append(CheckCellProblem(task, f"was turned into a {mine.cell_type} cell"))
        elif not mine.source.strip():
            problems.append(CheckCellProblem(task, "was emptied"))
        elif markers:
            problems.append(CheckCellProblem(task, f"carries {' and '.join(markers)}, which tells nbval not to "
                                                   "count its failure"))
        elif mine.source != check.source:
            problems.append(CheckCellProblem(task, "was edited"))
        elif "check" not in tags(mine):
            problems.append(CheckCellProblem(task, "lost its `check` tag"))
    return problems


def exercise_template(notebook: Path, root: Path = ROOT):
    """The exercise ``notebook`` as ``build`` generates it from ``root/solutions/``; None without a solution."""
    solution = root / "solutions" / notebook.name
    if not solution.exists():
        return None
    return make_exercise(read(solution), solution.name)


# --- one exercise ---------------------------------------------------------------------------------------

def _unreadable(path: Path, err: Exception) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = ""
    conflict = next((n for n, line in enumerate(text.splitlines(), 1) if line.startswith("<<<<<<<")), None)
    if conflict:
        why = f"it holds git merge-conflict markers (line {conflict})"
    elif text.lstrip().startswith("["):
        why = "it is JSON but not a notebook (a list, where a notebook is an object with its cells)"
    elif text.startswith("\ufeff"):
        why = ("it starts with a byte-order mark (an editor saved it as 'UTF-8 with BOM'): save it again as plain "
               "UTF-8")
    else:
        why = "it is not a complete notebook (a half-written save? an edit outside JupyterLab?)"
    return (f"cannot read {path.name}: {why} [{type(err).__name__}]. Restore it from exercises/.backup/ or with "
            "git, or resolve the conflict, then grade again")


def plan(notebook: Path, root: Path = ROOT):
    """The cells to run and, for each check, its task: ``(cells, {cell index: task}, notes)``.

    With a solution in ``root/solutions/``, its checks are the ones that count; otherwise the
    notebook's own cells tagged ``check`` (a notebook the course did not generate).
    """
    learner = read(notebook)
    template = exercise_template(notebook, root)
    notes: list[str] = []
    if template is None:
        cells = list(learner.cells)
        checks = {i: task_title(cells, i) for i, c in enumerate(cells) if "check" in tags(c)}
        return cells, checks, notes
    merged = merge_exercise(learner, template).notebook
    expected = {c.source for c in template.cells if "check" in tags(c)}
    cells, checks = [], {}
    for cell in merged.cells:
        if cell.cell_type != "code":
            cells.append(cell)
            continue
        if "check" in tags(cell) and cell.source not in expected:
            notes.append("an edited check cell was set aside; the grader ran the original check")
            continue
        if cell.source in expected and "check" in tags(cell):
            checks[len(cells)] = task_title(template.cells, template.cells.index(
                next(t for t in template.cells if t.source == cell.source)))
        cells.append(cell)
    learner_checks = [c.source for c in learner.cells if "check" in tags(c)]
    if (len(learner_checks) < len(expected) or any(NBVAL_MARKER.search(s) for s in learner_checks)
            or check_cell_problems(learner, template)):
        notes.append("check cells were deleted, edited or marked to be skipped; the grader ran the original checks")
    return cells, checks, list(dict.fromkeys(notes))


def _environment(err: BaseException) -> str:
    return (f"the course's Python environment is broken ({type(err).__name__}: {str(err).strip()[:300]}), so this "
            "exercise was not graded. Your notebook was not touched and is not the cause: run ./course doctor "
            "(it says what to repair)")


def _failed_all(notebook: Path, root: Path, why: str) -> list[CheckResult]:
    solution = root / "solutions" / notebook.name
    if not solution.exists():
        return []
    try:
        template = make_exercise(read(solution), solution.name)
    except Exception:  # noqa: BLE001
        return []
    return [CheckResult(task_title(template.cells, i), "failed", why)
            for i, c in enumerate(template.cells) if "check" in tags(c)]


UNVERIFIED = ("cannot be graded: the grader could not check its own state around this check (an answer cell "
              "replaced the shell's user_expressions, or the grader's state in the kernel?), so it cannot say the "
              "check ran unaltered. Remove the code that changes the shell or the grader, restart the kernel "
              "(Kernel > Restart) and grade again")


def pass_line_missing(task: str, stdout: str) -> bool:
    """Whether a check cell that ended "ok" failed to print its check's own ``✓ Task N`` line (every check that
    passes prints it: ``ampcourse.checks.passed``), as when an answer cell swallowed the check's error."""
    number = re.match(r"Task (\d+)\b", task)
    # Anywhere in the output, not only at a line's start: an answer the check calls may print without a newline
    # (print(n, end=" ")), and the ✓ line then follows on the same line. "✓ Task 2a" is Task 2's.
    mark = rf"✓ Task {number.group(1)}(?!\d)" if number else r"✓ "
    return re.search(mark, stdout) is None


def record_missing(task: str, ran: list[str]) -> bool:
    """Whether the course's own check of ``task`` recorded no pass (``ran``: the tasks :func:`guard_verify` found
    recorded by a real check function since the reset)."""
    number = re.match(r"Task (\d+)\b", task)
    if number is None:
        return not ran
    return not any(re.match(rf"Task {number.group(1)}(?!\d)", done) for done in ran)


NOT_RUN = ("cannot be graded: the check cell ended \"ok\", but the course's check never reached its pass: what ran "
           "was not the check as the course wrote it (an answer cell rewrote the check cell before it ran: IPython's "
           "compiler, parser or input transformers replaced, shell.compile.ast_parse, TransformerManager?). Remove "
           "that code, restart the kernel and grade again")


def output_problem(task: str, status: str, stdout: str, errors: list, ran: list[str] | None = None) -> str | None:
    """Why a check cell whose reply is ``status`` cannot count as passed although it ran: it published an error
    (``errors``: ``(ename, evalue)``), did not print its check's ``✓`` line, or (``ran``, from :func:`guard_verify`)
    the course's own check function never recorded its pass (review rev25-r3 E1: a check cell rewritten before it
    ran prints any line it likes); None when it is fine. Both graders ask it: one grader reads the reply's status,
    the other the errors on iopub, and an answer can fake either."""
    if status == "ok" and errors:
        ename, evalue = errors[0]
        return (f"the check failed ({ename}: {ANSI.sub('', evalue).strip()[:300]}), but that error was hidden "
                "from the kernel's reply or from the cell's output: an answer cell changed how IPython reports "
                "errors. Remove that code, restart the kernel and grade again")
    if status == "ok" and pass_line_missing(task, stdout):
        return ("cannot be graded: the check cell ended without the check's own ✓ line, so the check did not "
                "finish (an answer cell hid its error: set_custom_exc, a patched shell?). Remove that code, restart "
                "the kernel and grade again")
    if status == "ok" and ran is not None and record_missing(task, ran):
        return NOT_RUN
    return None


#: How :func:`guard_hazards` names a Python thread an answer cell left running. Such a thread (``torch.compile``'s
#: worker pool, an open ThreadPoolExecutor) does not fail a check by itself: the check runs, and
#: :func:`guard_verify` fails it if anything the grader relies on changed; a note says the thread was there.
RUNNING_THREAD = "a thread ("
#: How :func:`guard_hazards` names a thread that runs code of the learner's cells: the check cannot be graded.
CELL_THREAD = "a thread that runs your own code ("
#: How :func:`guard_hazards` names a value an answer changed that the reset could not put back (a course table, the
#: guard's own thread-start recorder): the check cannot be graded.
LEFT_VALUE = "a changed value the grader could not put back ("
#: How :func:`guard_hazards` ends the name of a thread of the learner's code that started while the check ran and
#: did not both start and end inside one call of the answer's function (``ampcourse.checks.call``/``noted_call``):
#: the check cannot be graded. (Review rev25-r4 E5: "still running after your function returned" was false of a
#: joined thread when a check called the answer without noting the call.)
STARTED_IN_CHECK = ", started while the check ran and not ended (joined or finished) before your function returned)"


#: How :func:`guard_hazards` names, at the verify, a thread the answer's code started while the check ran that runs
#: library code only (review rev25-r4 E2: a ThreadPoolExecutor's worker, given the answer's work): a note.
STARTED_NOTE = "a library thread your code started while the check ran ("


def split_hazards(hazards: list[str]) -> tuple[list[str], list[str]]:
    """``(blocking, threads)``: the hazards that make a check untrustworthy (trace, profile and audit hooks, a
    ``_thread`` thread) and the Python threads left running, which only earn a note (:data:`RUNNING_THREAD`,
    :data:`STARTED_NOTE`)."""
    threads = [hazard for hazard in hazards if hazard.startswith((RUNNING_THREAD, STARTED_NOTE))]
    return [hazard for hazard in hazards if hazard not in threads], threads


def running_note(threads: list[str]) -> str:
    """The note of a check that ran beside ``threads`` an answer cell left running and was found unchanged."""
    return (f"{', '.join(threads)} started by your cells was still running during the check; the grader found the "
            "check unchanged after it (a change made and undone while it ran cannot be ruled out)")


#: the end of a :func:`guard_hazards` entry for a setting in effect (a torch mode entered, a gc threshold), not a thing
#: left running
IN_EFFECT = " in effect"


def cannot_grade(hazards: list[str]) -> str:
    """The reason of a task whose check could not be trusted: ``hazards`` (:func:`guard_hazards`) were there, in a
    sentence per kind: what was left running (threads, hooks), and what was changed beyond repair."""
    values = [h[len(LEFT_VALUE):-1] for h in hazards if h.startswith(LEFT_VALUE)]
    started = [h for h in hazards if h.endswith(STARTED_IN_CHECK)]
    in_effect = [h[:-len(IN_EFFECT)] for h in hazards if h.endswith(IN_EFFECT)]
    running = [h for h in hazards if not h.startswith(LEFT_VALUE) and h not in started and not h.endswith(IN_EFFECT)]
    parts = []
    if started:
        parts.append(f"your code started {', '.join(started)}, so it could alter the grader while it checks")
    if running:
        parts.append(f"your cells left {', '.join(running)} running that could alter the grader while it checks")
    if in_effect:
        parts.append(f"your cells left {', '.join(in_effect)} in effect, through which code of theirs can run inside "
                     "the check")
    if values:
        parts.append(f"your cells changed {', '.join(values)}, which the grader could not put back")
    return (f"cannot be graded: {'; and '.join(parts)}. Restart the kernel (Kernel > Restart) and run your cells "
            "without it, then grade again")


def altered(changes: list[str]) -> str:
    """The reason of a task whose check was altered while it ran (:func:`guard_verify` found ``changes``)."""
    return (f"your answer cells altered the grader while this check ran ({', '.join(changes)}), so its result does "
            "not count. Remove the code that changes the grader or torch, restart the kernel and grade again")


def _reset_value(value) -> tuple[list[str] | None, list[str]]:
    """``(undone, hazards)`` from a guard_reset reply; ``(None, [])`` when the guard could not run."""
    if isinstance(value, tuple) and len(value) == 2 and all(isinstance(v, list) for v in value):
        return value
    return None, []


def _verify_value(value) -> tuple[list[str] | None, list[str], list[str] | None]:
    """``(changes, hazards, ran)`` from a guard_verify reply (:func:`guard_verify`); ``(None, [], None)`` when the
    guard could not run. A bare list of changes (a test's stand-in kernel) carries no pass record: ``ran`` None."""
    if isinstance(value, tuple) and len(value) == 3 and all(isinstance(v, list) for v in value):
        return value
    if isinstance(value, list):
        return value, [], None
    changes, hazards = _reset_value(value)
    return changes, hazards, None


def guard_verdict(undone, hazards, changes, after_hazards) -> tuple[str | None, list[str]]:
    """``(reason the task fails, notes)`` from the guard's replies around one check (None: the result stands).

    The rule both graders apply: the check counts only when the guard answered before and after it; no trace,
    profile or audit hook, ``_thread`` thread, or thread running the learner's code was there at either end
    (:func:`guard_hazards`); and nothing it compares changed while the check ran. A thread running library code
    only (torch.compile's workers, an open ThreadPoolExecutor) earns a note."""
    notes = []
    if undone is None or changes is None:
        return UNVERIFIED, notes
    blocking, threads = split_hazards(hazards)
    after_blocking, started = split_hazards(after_hazards)
    blocking += [h for h in after_blocking if h not in blocking]
    if undone:
        verified = " and found it unchanged after it, so only the real check counted" if not (
            blocking or changes) else ""
        notes.append(f"a cell before its check changed the grader ({', '.join(undone)}); the grader undid that "
                     f"before the check{verified}")
    if blocking:
        return cannot_grade(blocking), notes
    if changes:
        return altered(changes), notes
    if threads:
        notes.append(running_note(threads))
    if started:
        notes.append(f"{', '.join(started)}: it runs library code, so what your code handed it to run is not seen; "
                     "the grader found the check unchanged after it (a change made and undone meanwhile cannot be "
                     "ruled out)")
    return None, notes


def _guard(kernel: Kernel, timeout: float, call: str):
    """Run a guard call in the kernel (:func:`guard_expression`); its value, or None when it could not run."""
    nonce = new_nonce()
    run = kernel.run("", timeout, user_expressions={"g": guard_expression(call, nonce)})
    return guard_value(run.user_expressions.get("g", {}), nonce) if run.status == "ok" else None


def grade_one(notebook: Path, root: Path = ROOT, timeout: float = DEFAULT_TIMEOUT) -> ExerciseResult:
    """Grade one exercise notebook (see the module docstring).

    Only an error reading the notebook itself (not JSON, cut off, conflict markers, not a notebook) makes it
    "unreadable"; a broken environment (a package that does not import, a kernel that does not start) is
    reported as such, never blamed on the notebook.
    """
    try:
        read(notebook)
    except ImportError as err:
        return ExerciseResult(notebook.stem, _failed_all(notebook, root, "not graded"), [_environment(err)])
    except Exception as err:  # noqa: BLE001 - NotJSONError, a conflict, a cut-off file: report, go on
        return ExerciseResult(notebook.stem, _failed_all(notebook, root, "not graded: the notebook is unreadable"),
                              [_unreadable(notebook, err)])
    try:
        cells, checks, notes = plan(notebook, root)
        template = exercise_template(notebook, root)
        modules = _guard_modules(template) if template is not None else {}
        kernel = Kernel(notebook.parent)
    except Exception as err:  # noqa: BLE001 - nbval, jupyter_client or zmq broken: the environment
        return ExerciseResult(notebook.stem, _failed_all(notebook, root, "not graded"), [_environment(err)])
    results: list[CheckResult] = []
    problems: list[str] = []
    done: list[str] = []  # cells that ran fine: replayed after a restart
    install = f"guard_install(shell, {modules!r})"

    def prepare() -> None:
        # Load the check package first: it guards every check cell's torch state (ampcourse.checks.state).
        kernel.run("import ampcourse.checks", timeout)
        if modules:
            _guard(kernel, timeout, install)

    try:
        prepare()
        for index, cell in enumerate(cells):
            if cell.cell_type != "code" or not cell.source.strip():
                continue
            undone, hazards, changes, after_hazards, ran = [], [], [], [], None
            if index in checks and modules:
                undone, hazards = _reset_value(_guard(kernel, timeout, "guard_reset(shell)"))
            restarts = kernel.restarts
            run = kernel.run(cell.source, timeout)
            if index in checks and modules and kernel.restarts == restarts:
                changes, after_hazards, ran = _verify_value(_guard(kernel, timeout, "guard_verify(shell)"))
            if kernel.restarts != restarts:  # a fresh kernel: bring it back to where it was
                prepare()
                for source in done:
                    kernel.run(source, timeout)
                imports = [line for line in cell.source.splitlines() if IMPORT.match(line)]
                if imports:  # e.g. `from ampcourse.checks import lesson00 as check` for the next checks
                    kernel.run("\n".join(imports), timeout)
            if run.status == "ok":
                done.append(cell.source)
            if index in checks:
                task = checks[index]
                reason, guard_notes = guard_verdict(undone, hazards, changes, after_hazards) if modules else (
                    None, [])
                notes += [f"{task}: {note}" for note in guard_notes]
                reason = reason or output_problem(task, run.status, run.stdout, run.errors,
                                                  ran if modules else None)
                if reason:
                    results.append(CheckResult(task, "failed", reason))
                elif run.status == "ok":
                    results.append(CheckResult(task, "passed"))
                elif run.ename == "NotStarted":
                    results.append(CheckResult(task, "not started", _reason(run, timeout)))
                else:
                    results.append(CheckResult(task, "failed", _reason(run, timeout)))
            elif run.status != "ok":
                where = task_title(cells, index)
                problems.append(f"a cell in '{where}': {_reason(run, timeout)}")
    finally:
        kernel.stop()
    return ExerciseResult(notebook.stem, results, problems, notes)


# --- the table -----------------------------------------------------------------------------------------

def format_table(rows: list[ExerciseResult]) -> str:
    width = max([len("exercise")] + [len(row.name) for row in rows])
    lines = [f"{'exercise':<{width}}  checks  status", f"{'-' * width}  ------  ------"]
    for row in rows:
        done = sum(c.status == "passed" for c in row.checks)
        lines.append(f"{row.name:<{width}}  {done:>2}/{len(row.checks):<3}  {row.status}")
    total = sum(len(r.checks) for r in rows)
    done = sum(c.status == "passed" for r in rows for c in r.checks)
    lines.append(f"{'-' * width}  ------  ------")
    lines.append(f"{'total':<{width}}  {done:>2}/{total:<3}  "
                 f"{sum(r.status == 'passed' for r in rows)} of {len(rows)} exercises passed")
    for row in rows:
        if row.status == "passed" and not row.notes:
            continue
        if row.status == "not started":
            lines.append(f"\n{row.name}: not started")
            continue
        lines.append(f"\n{row.name}:")
        for problem in row.problems:
            lines.append(f"  ✗ {problem}")
        for check in row.checks:
            if check.status != "passed":
                lines.append(f"  ✗ {check.task} ({check.status}): {check.reason}")
        for note in row.notes:
            lines.append(f"  note: {note}")
    lines.append(f"\n({SAVE_FIRST})")
    return "\n".join(lines)


def grade(paths: list[str] | None = None, root: Path = ROOT,
          timeout: float | None = None) -> tuple[str, int]:
    """Grade exercise notebooks (all of ``exercises/`` by default); return the table and an exit code."""
    timeout = DEFAULT_TIMEOUT if timeout is None else timeout
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= 24 * 3600:
        raise ValueError(f"timeout must be a number of seconds in (0, 86400], got {timeout!r}")
    if paths is not None and (isinstance(paths, (str, Path)) or not all(isinstance(p, (str, Path)) for p in paths)):
        raise TypeError("paths must be a list of notebook paths, e.g. ['exercises/00_start_here.ipynb']")
    targets: list[Path] = []
    own: list[Path] = []  # notebooks in exercises/ without a solution: the learner's own, not graded

    def add(path: Path, given_by_name: bool) -> None:
        course = (root / "solutions" / path.name).exists()
        if not course and (not given_by_name or not _own_checks(path)):
            own.append(path)
        else:
            targets.append(path)

    for given in paths or []:
        target = Path(given)
        target = target if target.is_absolute() else Path.cwd() / target
        if target.is_dir():
            for path in sorted(target.glob("*.ipynb")):
                add(path, False)
        elif target.suffix != ".ipynb" or not target.exists():
            raise ValueError(f"not an exercise notebook: {given} (give paths like exercises/00_start_here.ipynb, "
                             "or a folder)")
        else:
            add(target, True)
    if not paths:
        for path in sorted((root / "exercises").glob("*.ipynb")):
            add(path, False)
    if not targets:
        raise ValueError(f"no exercise notebooks found in {paths or [str(root / 'exercises')]}"
                         + (f" ({', '.join(p.name for p in own)}: not course exercises)" if own else ""))
    rows: list[ExerciseResult] = []
    interrupted = False
    try:
        for number, target in enumerate(targets, 1):
            # Progress (issue 15): one line per exercise on stderr, so a minute of grading never looks hung.
            print(f"[grade] {number}/{len(targets)} {target.stem} …", file=sys.stderr, flush=True)
            rows.append(grade_one(target, root, timeout))
    except KeyboardInterrupt:  # Ctrl-C: the kernel is already stopped (grade_one's finally); show what was done
        interrupted = True
    table = format_table(rows) if rows else "(no exercise graded)"
    if own:
        table += "\n" + "\n".join(f"{p.name}: not a course exercise (no solutions/{p.name}), not graded"
                                     for p in own)
    if interrupted:
        return table + f"\ninterrupted (Ctrl-C) after {len(rows)} of {len(targets)} exercise(s)", 130
    return table, 0 if all(r.status == "passed" for r in rows) else 1


def _own_checks(path: Path) -> bool:
    """Whether a notebook the course did not generate has check cells of its own to grade."""
    try:
        return any("check" in tags(c) for c in read(path).cells)
    except Exception:  # noqa: BLE001 - unreadable: grade_one reports it
        return True
