"""A grader that is not fooled quietly (reliability audit r3, findings 5, 13, 14, 19, 20).

* 13: ipykernel answers "aborted" to a request that arrives while it is still aborting after an error; the
  grader counted that as passed. A stand-in kernel client answers "aborted" here (no kernel needed).
* 14: one line in an answer cell (patching the check module, an input transformer, rebinding ``check``) forged a
  pass; the grader now undoes it before each check and says so (real kernels, exercise 00).
* 19: a broken environment (a package that does not import) was blamed on the learner's notebook.
* 5: a notebook of the learner's own in exercises/ is listed once as "not a course exercise", not graded 0/0.
"""

import hashlib
import queue
import re
import shutil

import nbformat
import pytest
from review_forgeries import OTHER_FORGERIES, REVIEW_FORGERIES, one_line_forgery  # shared with test_pytest_plugin.py

from ampcourse import authoring, grading
from ampcourse.course import ROOT

NAME = "00_start_here.ipynb"
SOLUTION = ROOT / "solutions" / NAME
RIGHT_TASK1 = "return t.numel() * t.element_size()"


class FakeClient:
    """A kernel client whose replies a test chooses: ``replies(source) -> list of statuses``, one per request."""

    def __init__(self, replies):
        self.replies, self.sent, self.pending, self.iopub = replies, [], [], []

    def execute(self, code, **kwargs):
        self.sent.append((code, kwargs))
        msg_id = f"m{len(self.sent)}"
        status = self.replies(code, kwargs, len([c for c, _ in self.sent if c == code]))
        content = {"status": status}
        expressions = kwargs.get("user_expressions") or {}
        if status == "ok" and expressions:
            nonce = re.search(r"'_nonce': '([0-9a-f]+)'", expressions["g"]).group(1)  # the guard's reply
            call = re.search(r"hexdigest\(\), (guard_\w+)\(", expressions["g"]).group(1)  # the guard's call
            value = repr((hashlib.sha256(nonce.encode()).hexdigest(),
                          {"guard_install": "installed", "guard_reset": ([], [])}.get(call, [])))
            content["user_expressions"] = {"g": {"status": "ok", "data": {"text/plain": value}}}
        if status == "error":
            content.update(ename="CheckFailed", evalue="wrong", traceback=[])
        self.pending.append({"parent_header": {"msg_id": msg_id}, "content": content})
        if not expressions:  # what a passing check prints (both graders require its ✓ line), then "idle"
            parent = {"msg_id": msg_id}
            self.iopub += [{"parent_header": parent, "msg_type": "status", "content": {"execution_state": "busy"}},
                           {"parent_header": parent, "msg_type": "stream",
                            "content": {"name": "stdout", "text": "✓ Task 1 (a)\n✓ Task 2 (b)\n✓ Task 3 (c)\n"}},
                           {"parent_header": parent, "msg_type": "status", "content": {"execution_state": "idle"}}]
        return msg_id

    def get_shell_msg(self, timeout=None):
        if not self.pending:
            raise queue.Empty
        return self.pending.pop(0)

    def get_iopub_msg(self, timeout=None):
        if not self.iopub:
            raise queue.Empty
        return self.iopub.pop(0)

    def stop_channels(self):
        pass


class FakeManager:
    def is_alive(self):
        return True

    def shutdown_kernel(self, now=False):
        pass


def fake_kernel(monkeypatch, replies):
    clients = []

    def start(self):
        self.km, self.kc = FakeManager(), FakeClient(replies)
        clients.append(self.kc)
    monkeypatch.setattr(grading.Kernel, "start", start)
    return clients


def test_an_aborted_reply_is_sent_again_then_reported_not_run(monkeypatch):
    clients = fake_kernel(monkeypatch, lambda code, kw, n: "aborted")
    kernel = grading.Kernel(ROOT)
    run = kernel.run("x = 1", 5)
    assert run.status == "not run" and "did not run this cell" in grading._reason(run, 5)
    assert len(clients[0].sent) == 2  # sent once more
    assert all(kw.get("stop_on_error") is False for _, kw in clients[0].sent)
    clients = fake_kernel(monkeypatch, lambda code, kw, n: "aborted" if n == 1 else "ok")
    assert grading.Kernel(ROOT).run("x = 1", 5).status == "ok"


def test_a_check_the_kernel_aborted_never_counts_as_passed(tmp_path, monkeypatch):
    """The audit's race: Task 1's check cell aborted (so its check never ran) was graded passed."""
    (tmp_path / "solutions").mkdir()
    (tmp_path / "exercises").mkdir()
    shutil.copy(SOLUTION, tmp_path / "solutions" / NAME)
    shutil.copy(SOLUTION, tmp_path / "exercises" / NAME)
    first_check = next(c.source for c in authoring.read(SOLUTION).cells if "check" in authoring.tags(c))
    fake_kernel(monkeypatch, lambda code, kw, n: "aborted" if code == first_check else "ok")
    result = grading.grade_one(tmp_path / "exercises" / NAME, tmp_path, timeout=5)
    assert [c.status for c in result.checks] == ["failed", "passed", "passed"], result
    assert "did not run this cell" in result.checks[0].reason


def test_a_broken_environment_is_not_blamed_on_the_notebook(tmp_path, monkeypatch):
    """Finding 19: with pyzmq deleted, grade said the intact notebook was 'not a complete notebook' and to restore
    it with git (which would erase the answers)."""
    (tmp_path / "solutions").mkdir()
    (tmp_path / "exercises").mkdir()
    shutil.copy(SOLUTION, tmp_path / "solutions" / NAME)
    shutil.copy(SOLUTION, tmp_path / "exercises" / NAME)

    def no_zmq(*args, **kwargs):
        raise ModuleNotFoundError("No module named 'zmq'")
    monkeypatch.setattr(grading, "check_cell_problems", no_zmq)
    result = grading.grade_one(tmp_path / "exercises" / NAME, tmp_path)
    text = " ".join(result.problems)
    assert "environment is broken" in text and "./course doctor" in text and "zmq" in text, text
    assert "cannot read" not in text and "git" not in text
    assert result.status == "failed" and len(result.checks) == 3
    # A notebook that really is cut off is still called unreadable.
    monkeypatch.undo()
    (tmp_path / "exercises" / NAME).write_text(SOLUTION.read_text()[:500])
    assert "cannot read" in " ".join(grading.grade_one(tmp_path / "exercises" / NAME, tmp_path).problems)


def test_a_notebook_of_the_learners_own_is_listed_once_and_not_graded(tmp_path, monkeypatch):
    (tmp_path / "solutions").mkdir()
    (tmp_path / "exercises").mkdir()
    shutil.copy(SOLUTION, tmp_path / "solutions" / NAME)
    shutil.copy(SOLUTION, tmp_path / "exercises" / NAME)
    nbformat.write(nbformat.v4.new_notebook(), tmp_path / "exercises" / "Untitled.ipynb")
    shutil.copy(SOLUTION, tmp_path / "exercises" / "00_start_here-Copy1.ipynb")
    graded = []
    monkeypatch.setattr(grading, "grade_one", lambda path, root, timeout: graded.append(path.name) or
                        grading.ExerciseResult(path.stem, [grading.CheckResult("Task 1", "passed")]))
    table, code = grading.grade(root=tmp_path)
    assert graded == [NAME] and code == 0, table
    assert table.count("Untitled.ipynb: not a course exercise") == 1
    assert "00_start_here-Copy1.ipynb: not a course exercise" in table
    assert "1 of 1 exercises passed" in table


def test_ctrl_c_stops_grade_and_shows_what_was_done(tmp_path, monkeypatch):
    """Finding 20: Ctrl-C during grade printed nothing useful (or was waited out); now: the rows done, exit 130."""
    (tmp_path / "solutions").mkdir()
    (tmp_path / "exercises").mkdir()
    for name in (NAME, "01_float_formats.ipynb"):
        shutil.copy(SOLUTION, tmp_path / "solutions" / name)
        shutil.copy(SOLUTION, tmp_path / "exercises" / name)

    def one(path, root, timeout):
        if path.name != NAME:
            raise KeyboardInterrupt
        return grading.ExerciseResult(path.stem, [grading.CheckResult("Task 1", "passed")])
    monkeypatch.setattr(grading, "grade_one", one)
    table, code = grading.grade(root=tmp_path)
    assert code == 130 and "interrupted (Ctrl-C) after 1 of 2" in table and "00_start_here" in table


FORGERIES = {
    # Task 1 wrong, and the answer cell patches every check of the lesson.
    "patched_checks": ("return 0\n"
                       "import ampcourse.checks.lesson00 as c\n"
                       "c.tensor_bytes = c.amp_forward = c.choose_recipe = lambda f: print('✓')\n",
                       ["failed", "passed", "passed"], "the check module ampcourse.checks.lesson00"),
    # Task 1 wrong, and an input transformer turns every check cell into `pass`.
    "input_transformer": ("return 0\n"
                          "get_ipython().input_transformers_cleanup.append(\n"
                          "    lambda l: ['pass\\n'] if any('check.' in x for x in l) else l)\n",
                          ["failed", "passed", "passed"], "input transformers"),
}


def _forged(body):
    def edit(nb):
        for cell in nb.cells:
            if RIGHT_TASK1 in cell.source:
                lines = cell.source.replace(RIGHT_TASK1, "return 0").splitlines()
                extra = [line for line in body.splitlines()[1:]]
                cell.source = "\n".join(lines + extra)
        return nb
    return edit


def test_a_forged_pass_is_undone_and_reported(tmp_path, figures):
    (tmp_path / "solutions").mkdir()
    (tmp_path / "exercises").mkdir()
    for name, (body, _, _) in FORGERIES.items():
        shutil.copy(SOLUTION, tmp_path / "solutions" / f"{name}.ipynb")
        nbformat.write(_forged(body)(authoring.read(SOLUTION)), tmp_path / "exercises" / f"{name}.ipynb")
    rebound = authoring.read(SOLUTION)  # Task 2's cell rebinds `check` to something that accepts anything
    cell = next(c for c in rebound.cells if "def amp_forward" in c.source)
    cell.source = "def amp_forward(model, x):\n    return None\n\nclass _Any:\n    def __getattr__(self, name):\n" \
                  "        return lambda *a: print('✓')\n\ncheck = _Any()\n"
    shutil.copy(SOLUTION, tmp_path / "solutions" / "rebound_check.ipynb")
    nbformat.write(rebound, tmp_path / "exercises" / "rebound_check.ipynb")
    results = {r.name: r for r in (grading.grade_one(p, tmp_path, timeout=120)
                                   for p in sorted((tmp_path / "exercises").glob("*.ipynb")))}
    figures("grade on forged passes:\n" + grading.format_table(list(results.values())))
    for name, (_, statuses, undone) in FORGERIES.items():
        assert [c.status for c in results[name].checks] == statuses, results[name]
        assert any(undone in note and "Task 1" in note for note in results[name].notes), results[name].notes
    assert [c.status for c in results["rebound_check"].checks] == ["passed", "failed", "passed"], results
    assert any("the name `check`" in note for note in results["rebound_check"].notes), results["rebound_check"]


def test_grade_help_gives_the_real_default_timeout(capsys):
    """Audit r3, finding 18: `grade --help` said "default: 120" while the grader used 180."""
    from ampcourse.__main__ import main

    try:
        main(["grade", "--help"])
    except SystemExit:
        pass
    assert f"default: {grading.DEFAULT_TIMEOUT})" in capsys.readouterr().out.replace("\n", " ").replace("  ", " ")


# Audit r3 re-check (#14): forgeries that once passed quietly. Each answer cell is wrong and forges its own check; one
# notebook (one kernel) holds them all, since each check's reset undoes only what came before it.
FORGED_LESSON = "def tensor_bytes(f):\n    print('✓')\n\namp_forward = choose_recipe = tensor_bytes\n"
REWRITES = {
    "def tensor_bytes": (  # the guard's own function and the check module's functions replaced
        "tensor_bytes = lambda t: 0\nimport ampcourse.grading as g, ampcourse.checks.lesson00 as c\n"
        "g.guard_reset = lambda s: []\nc.tensor_bytes = c.amp_forward = c.choose_recipe = lambda f: print('✓')\n",
        ["the check module ampcourse.checks.lesson00"]),
    "def amp_forward": (  # the shell's transform_cell replaced; the checks' helper `call` answers "equal" to anything
        "amp_forward = lambda model, x: None\nip = get_ipython(); _o = ip.transform_cell\n"
        "ip.transform_cell = lambda raw: 'pass\\n' if 'check.' in raw else _o(raw)\n"
        "import ampcourse.checks as p\nclass A(int):\n    __eq__ = lambda s, o: True\n    __hash__ = int.__hash__\n"
        "p.call = lambda *a, **k: A(0)\n",
        ["shell.transform_cell", "ampcourse.checks.call"]),
    "def choose_recipe": (  # forged checks first on the package's path; run_code clears the check's error
        "choose_recipe = lambda cc: None\nimport ampcourse.checks as p\np.__path__.insert(0, FORGED)\n"
        "ip = get_ipython(); _rc = ip.run_code\nasync def _run(code_obj, result=None, *, async_=False):\n"
        "    await _rc(code_obj, result, async_=async_)\n    if result is not None:\n"
        "        result.error_in_exec = None\n    return False\nip.run_code = _run\n",
        ["ampcourse.checks.__path__", "shell.run_code"]),
}


def test_forgeries_of_the_guard_the_shell_and_the_check_package_are_undone_and_reported(tmp_path, figures):
    forged = tmp_path / "forged"
    forged.mkdir()
    (forged / "lesson00.py").write_text(FORGED_LESSON)
    (tmp_path / "solutions").mkdir()
    (tmp_path / "exercises").mkdir()
    nb = authoring.read(SOLUTION)
    for cell in nb.cells:
        for start, (extra, _) in REWRITES.items():
            if cell.cell_type == "code" and start in cell.source:
                cell.source += "\n" + extra.replace("FORGED", repr(str(forged)))
    shutil.copy(SOLUTION, tmp_path / "solutions" / "forged.ipynb")
    nbformat.write(nb, tmp_path / "exercises" / "forged.ipynb")
    result = grading.grade_one(tmp_path / "exercises" / "forged.ipynb", tmp_path, timeout=120)
    figures("grade on forgeries of the guard, the shell and the check package:\n" + grading.format_table([result]))
    assert [c.status for c in result.checks] == ["failed"] * 3, result
    for (_, undone), task in zip(REWRITES.values(), ("Task 1", "Task 2", "Task 3"), strict=True):
        note = next((n for n in result.notes if n.startswith(task)), "")
        assert all(what in note for what in undone), (task, result.notes)


def test_a_replaced_user_expressions_fails_as_cannot_be_graded(tmp_path):
    """The guard runs through the shell's ``user_expressions``; a cell that replaces it (to answer "nothing to undo")
    cannot give the nonce's digest. Review rev25-r2 E7: a note was not enough (the patched checks then passed); the
    task now fails as "cannot be graded", since no honest answer replaces user_expressions."""
    (tmp_path / "solutions").mkdir()
    (tmp_path / "exercises").mkdir()
    nb = authoring.read(SOLUTION)
    cell = next(c for c in nb.cells if "def tensor_bytes" in c.source)
    cell.source += ("\nip = get_ipython()\nip.user_expressions = lambda e: {k: {'status': 'ok', 'data': "
                    "{'text/plain': '[]'}, 'metadata': {}} for k in e}\n")
    shutil.copy(SOLUTION, tmp_path / "solutions" / "ue.ipynb")
    nbformat.write(nb, tmp_path / "exercises" / "ue.ipynb")
    result = grading.grade_one(tmp_path / "exercises" / "ue.ipynb", tmp_path, timeout=120)
    assert [c.status for c in result.checks] == ["failed"] * 3, result
    assert all(c.reason == grading.UNVERIFIED for c in result.checks), result


# No-context review (this session): two ways an answer cell forged a pass silently. (1) A background thread that
# re-patches the check module after the guard's reset; grade said "the grader undid that, so only the real check
# counted" (false). (2) torch itself patched (`torch.Tensor.element_size`), outside `ampcourse.*`. Each answer here
# is wrong for Task 1 (or forges it while the check runs) and must not pass; the legitimate thread must.



def _task1_answer(source, others=None):
    nb = authoring.read(SOLUTION)
    next(c for c in nb.cells if RIGHT_TASK1 in c.source).source = source
    for needle, cell in (others or {}).items():
        next(c for c in nb.cells if c.cell_type == "code" and needle in c.source).source = cell
    return nb


def test_review_forgeries_fail_in_grade_and_a_finished_thread_passes(tmp_path, figures):
    (tmp_path / "solutions").mkdir()
    (tmp_path / "exercises").mkdir()
    for name, (source, _, _, *others) in REVIEW_FORGERIES.items():
        shutil.copy(SOLUTION, tmp_path / "solutions" / f"{name}.ipynb")
        nbformat.write(_task1_answer(source, *others), tmp_path / "exercises" / f"{name}.ipynb")
    results = {r.name: r for r in (grading.grade_one(p, tmp_path, timeout=120)
                                   for p in sorted((tmp_path / "exercises").glob("*.ipynb")))}
    figures("grade on the review's forgeries:\n" + grading.format_table(list(results.values())))
    for name, (_, status, words, *_) in REVIEW_FORGERIES.items():
        task1 = results[name].checks[0]
        assert task1.status == status, (name, results[name])
        assert all(w.lower() in task1.reason.lower() for w in words), (name, task1.reason)
        for check in results[name].checks:  # never "only the real check counted" where it was not verified
            if "cannot be graded" in check.reason or "altered the grader" in check.reason:
                assert not any(n.startswith(check.task) and "only the real check counted" in n
                               for n in results[name].notes), (name, results[name].notes)
    assert "torch.Tensor.element_size" in " ".join(results["torch_patch"].notes), results["torch_patch"].notes
    assert results["legit_threads"].status == "passed" and not results["legit_threads"].notes, results["legit_threads"]
    # torch.compile in Task 1 and Task 2 (dynamo wraps Module.__init__ itself): passed, nothing undone or altered.
    assert results["torch_compile"].status == "passed", results["torch_compile"]
    assert not any("changed the grader" in n for n in results["torch_compile"].notes), results["torch_compile"]
    # A thread running the answer's code never lets a task pass, whatever it claims to be.
    for name in ("thread_during_check", "thread_as_kernel", "thread_via_course"):
        assert [c.status for c in results[name].checks] == ["failed"] * 3, results[name]
    # The guard unable to answer: no task of that kernel counts.
    for name in ("user_expressions", "guard_state_broken"):
        assert all("cannot be graded" in c.reason for c in results[name].checks), results[name]
    # A pool left open (torch.compile leaves one) is no forgery: passed, with a note that it ran beside the check.
    assert results["open_pool"].status == "passed", results["open_pool"]
    assert any("still running during the check" in n for n in results["open_pool"].notes), results["open_pool"]
    # The forging thread keeps running the answer's code: no later check of that kernel can be graded either.
    assert [c.status for c in results["thread"].checks] == ["failed"] * 3, results["thread"]
    assert all("cannot be graded" in c.reason for c in results["thread"].checks), results["thread"]


def test_the_note_says_only_the_real_check_counted_only_once_verified(tmp_path):
    """A forgery undone before the check, and nothing changed while the check ran: the note may say so."""
    (tmp_path / "solutions").mkdir()
    (tmp_path / "exercises").mkdir()
    shutil.copy(SOLUTION, tmp_path / "solutions" / NAME)
    nbformat.write(_task1_answer("import torch\ntorch.Tensor.element_size = lambda self: 4\n"
                                 "def tensor_bytes(t):\n    return t.untyped_storage().element_size() * 0 + "
                                 "t.numel() * t.dtype.itemsize\n"), tmp_path / "exercises" / NAME)
    result = grading.grade_one(tmp_path / "exercises" / NAME, tmp_path, timeout=120)
    assert [c.status for c in result.checks] == ["passed"] * 3, result
    assert any("torch.Tensor.element_size" in n and "found it unchanged after it, so only the real check counted"
               in n for n in result.notes), result.notes


def test_every_exercise_imports_a_check_module_the_guard_finds():
    """Review rev25-r2 E1: exercises 08 and 11 import their check module in an ordinary cell, and the guard (which
    read only cells tagged `check`) guarded nothing there."""
    for path in sorted((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb")):
        modules = grading._guard_modules(grading.exercise_template(ROOT / "exercises" / path.name))
        assert modules.get("check") == f"lesson{path.name[:2]}", (path.name, modules)


def forged_exercise(name):
    """Exercise ``name`` as generated (every task a stub: made from its solution, not read from exercises/, which
    in a learner's working copy holds their answers), with the one-line forgery added before its first check
    cell."""
    nb = authoring.make_exercise(authoring.read(ROOT / "solutions" / name), name)
    first = next(i for i, c in enumerate(nb.cells) if "check" in authoring.tags(c))
    nb.cells.insert(first, nbformat.v4.new_code_cell(one_line_forgery(f"lesson{name[:2]}")))
    return nb


EXERCISES = sorted(p.name for p in (ROOT / "solutions").glob("[0-9][0-9]_*.ipynb"))


@pytest.mark.parametrize("name", EXERCISES)
def test_the_one_line_forgery_passes_no_task_of_any_exercise(tmp_path, name):
    """Review rev25-r2 E1: the audit's one-line forgery, in every exercise 00-11: no task passes, and the note
    names the check module that was put back (tests/test_pytest_plugin.py runs the same under pytest --nbval)."""
    (tmp_path / "solutions").mkdir()
    (tmp_path / "exercises").mkdir()
    shutil.copy(ROOT / "solutions" / name, tmp_path / "solutions" / name)
    nbformat.write(forged_exercise(name), tmp_path / "exercises" / name)
    result = grading.grade_one(tmp_path / "exercises" / name, tmp_path, timeout=120)
    assert result.checks and all(c.status != "passed" for c in result.checks), result
    assert any(f"the check module ampcourse.checks.lesson{name[:2]}" in n for n in result.notes), result.notes


@pytest.mark.parametrize("label", sorted(OTHER_FORGERIES))
def test_forgeries_of_other_exercises_fail_in_grade(tmp_path, label):
    """Review rev25-r2 E8: lesson 04's truth computed through torch's private _amp_ kernels, replaced by a cell."""
    name, edits, task, status, words = OTHER_FORGERIES[label]
    (tmp_path / "solutions").mkdir()
    (tmp_path / "exercises").mkdir()
    shutil.copy(ROOT / "solutions" / name, tmp_path / "solutions" / name)
    nb = authoring.read(ROOT / "solutions" / name)
    for needle, cell in edits.items():
        next(c for c in nb.cells if c.cell_type == "code" and needle in c.source).source = cell
    nbformat.write(nb, tmp_path / "exercises" / name)
    result = grading.grade_one(tmp_path / "exercises" / name, tmp_path, timeout=120)
    assert result.checks[task].status == status, result
    assert all(w in result.checks[task].reason for w in words), result.checks[task]


def test_a_check_cell_that_hid_its_error_does_not_pass():
    """Review rev25-r2 E5/E6: each grader reads what the other can be fooled on: a reply "ok" with an error on
    iopub, or a cell that ended "ok" without its check's ✓ line, never passes."""
    task = "Task 2 · Your first autocast region"
    assert grading.output_problem(task, "ok", "✓ Task 2 (amp_forward): fine\n", []) is None
    assert "ended without the check's own ✓ line" in grading.output_problem(task, "ok", "", [])
    assert "ended without the check's own ✓ line" in grading.output_problem(task, "ok", "✓ Task 1 (x): ok\n", [])
    assert "changed how IPython reports errors" in grading.output_problem(
        task, "ok", "✓ Task 2 (amp_forward)\n", [("CheckFailed", "✗ Task 2 (amp_forward): wrong")])
    assert grading.output_problem(task, "error", "", [("CheckFailed", "wrong")]) is None  # failed on its own
    # review rev25-r3 E2: an honest answer the check calls printed without a newline (print(n, end=" "))
    assert grading.output_problem(task, "ok", "3 12 ✓ Task 2 (amp_forward): fine\n", []) is None
    assert "ended without" in grading.output_problem("Task 1 · x", "ok", "✓ Task 10 (y): ok\n", [])


def test_an_unverified_check_or_a_thread_running_the_answers_code_is_never_a_clean_pass():
    """Review rev25-r2 E2/E7: the verdict rule both graders share (grading.guard_verdict)."""
    reason, notes = grading.guard_verdict(None, [], [], [])
    assert reason == grading.UNVERIFIED and reason.startswith("cannot be graded")
    assert grading.guard_verdict([], [], None, [])[0] == grading.UNVERIFIED
    thread = f"{grading.CELL_THREAD}Thread-5 (_w): _w in 1.py)"
    assert grading.guard_verdict([], [thread], [], [])[0].startswith("cannot be graded")
    assert grading.guard_verdict([], [], [], [thread])[0].startswith("cannot be graded")  # seen only after it
    pool = f"{grading.RUNNING_THREAD}ThreadPoolExecutor-0_0, running library code only)"
    reason, notes = grading.guard_verdict([], [pool], [], [])
    assert reason is None and "still running during the check" in notes[0]
    reason, notes = grading.guard_verdict(["torch.Tensor.element_size"], [], [], [])
    assert reason is None and "only the real check counted" in notes[0]
    reason, notes = grading.guard_verdict(["x"], [], ["ampcourse.checks.lesson00.call"], [])
    assert "altered the grader" in reason and "only the real check counted" not in notes[0]


def test_a_deprecated_default_tensor_type_is_not_called_a_change_of_the_grader(tmp_path):
    """Review rev25-r16 M1: ``torch.set_default_tensor_type`` passes, but its deprecation warning made the warnings
    module write ``torch.__warningregistry__``, and the note said the cell "changed the grader"."""
    (tmp_path / "solutions").mkdir()
    (tmp_path / "exercises").mkdir()
    shutil.copy(SOLUTION, tmp_path / "solutions" / NAME)
    nb = authoring.read(SOLUTION)
    cell = next(c for c in nb.cells if RIGHT_TASK1 in c.source)
    cell.source = "import torch\ntorch.set_default_tensor_type(torch.DoubleTensor)\n" + cell.source
    nbformat.write(nb, tmp_path / "exercises" / NAME)
    result = grading.grade_one(tmp_path / "exercises" / NAME, tmp_path, timeout=120)
    assert [c.status for c in result.checks] == ["passed"] * 3, result
    assert not any("__warningregistry__" in n for n in result.notes), result.notes
