"""One rule for taught code: lessons and solutions show package code with ``source.code_of`` (from what ran),
import public names only, never call ``inspect.getsource``, and hold no markdown fence that copies package code
unless the copy is exact.

What counts as a fence of package code (the rule :func:`fence_problems` applies to every ```` ```python ````
fence in the markdown cells of ``notebooks/`` and ``solutions/``):

* a fence whose first line is a marker comment ``# ampcourse.module.function`` declares itself a copy: its code
  lines must be a contiguous run of that function's code (comments, blank lines and indentation aside);
* an unmarked fence presents package code when its cell names the package (``ampcourse/x.py``, ``ampcourse.x``
  or a backticked module-level public function of a topic module) and at least 70 % of its code lines (three or
  more) are lines of one function of the package's topic modules. It must then be an exact run of that function.
  Fences of the torch recipe that no cell presents as the package's (lesson 05's accumulation and clipping
  sketches) are the lesson's own text, not copies.
"""

from __future__ import annotations

import ast
import importlib
import json
import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb")) + sorted((ROOT / "solutions").glob("*.ipynb"))
FENCE = re.compile(r"```python\n(.*?)```", re.S)
MARKER = re.compile(r"^#\s*(ampcourse(?:\.\w+)+)\s*$")
NAMES_PACKAGE = re.compile(r"ampcourse[./]\w+")
SHARE, MIN_LINES = 0.7, 3


def _cells(path: Path, kind: str) -> list[tuple[int, str]]:
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return [(i, "".join(c["source"])) for i, c in enumerate(cells) if c["cell_type"] == kind]


def _python(source: str) -> str:
    """A code cell without IPython magics and shell lines (``%time``, ``!ls``), so that ``ast`` can read it."""
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines())


# --- private names and inspect.getsource -----------------------------------------------------------------------

def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def code_problems(source: str) -> list[str]:
    """What a lesson's code cell does against the rule: private ``ampcourse`` names, ``inspect.getsource``."""
    tree = ast.parse(_python(source))
    problems, package_names = [], set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "ampcourse":
            package_names |= {alias.asname or alias.name for alias in node.names}
            problems += [f"imports the private name {node.module}.{alias.name}" for alias in node.names
                         if _private(alias.name) or any(_private(part) for part in node.module.split("."))]
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "ampcourse":
                    package_names.add(alias.asname or "ampcourse")
                    problems += [f"imports the private module {alias.name}" for part in alias.name.split(".")
                                 if _private(part)]
        if isinstance(node, ast.ImportFrom) and node.module == "inspect" and any(
                alias.name == "getsource" for alias in node.names):
            problems.append("imports inspect.getsource")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "getsource":
            problems.append("calls inspect.getsource")
        if isinstance(node, ast.Attribute) and _private(node.attr):
            root = node.value
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name) and root.id in package_names:
                problems.append(f"uses the private name .{node.attr} of {root.id}")
    return problems


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_lessons_and_solutions_use_public_names_and_no_getsource(path):
    found = [f"cell [{i}] {problem}" for i, source in _cells(path, "code") for problem in code_problems(source)]
    assert not found, f"{path.name}: " + "; ".join(found) + (
        ". Print package code with ampcourse.source.code_of, and make what a lesson uses public (no underscore).")


def test_the_code_rule_catches_private_names_and_getsource():
    assert code_problems("from ampcourse.accumulation import _loss, one_amp_step") == [
        "imports the private name ampcourse.accumulation._loss"]
    assert code_problems("from ampcourse import fp8\nfp8._train_step(1)") == [
        "uses the private name ._train_step of fp8"]
    assert code_problems("import ampcourse.bench as b\nb.steps._prepare_step") == [
        "uses the private name ._prepare_step of b"]
    assert code_problems("import inspect\nprint(inspect.getsource(f).split('\"\"\"'))") == ["calls inspect.getsource"]
    assert code_problems("from ampcourse.source import code_of\n%time x = 1\nprint(code_of(f))\nx.__class__") == []


# --- markdown fences of package code ---------------------------------------------------------------------------

def _norm(line: str) -> str:
    """A code line without its comment and indentation (a ``#`` inside a string is rare enough in fences)."""
    return re.sub(r"(^|\s)#.*$", "", line).strip()


def _code_lines(text: str) -> list[str]:
    return [line for line in map(_norm, text.splitlines()) if line]


# Not topic modules: graders and quizzes, and the tooling and notebook plumbing no lesson teaches from.
NOT_TOPIC = {"checks", "quizzes", "__init__.py", "__main__.py", "authoring.py", "course.py", "gpucheck.py",
             "grading.py", "lesson_map.py", "pytest_plugin.py", "quiz.py", "source.py", "tables.py", "update.py",
             "validate.py"}


def _topic_modules() -> list[str]:
    package = ROOT / "ampcourse"
    return sorted(".".join(("ampcourse", *p.relative_to(package).with_suffix("").parts)).removesuffix(".__init__")
                  for p in package.rglob("*.py") if p.relative_to(package).parts[0] not in NOT_TOPIC)


@cache
def package_functions() -> dict[str, list[str]]:
    """``"ampcourse.module.function"`` (methods: ``module.Class.method``) -> its code lines, docstring left out."""
    out: dict[str, list[str]] = {}
    for name in _topic_modules():
        path = ROOT / (name.replace(".", "/") + ".py")
        if not path.exists():
            path = ROOT / name.replace(".", "/") / "__init__.py"
        text = path.read_text(encoding="utf-8").splitlines()

        def visit(body, prefix, text=text):
            for node in body:
                if isinstance(node, ast.ClassDef):
                    visit(node.body, f"{prefix}.{node.name}", text)
                elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    first = node.body[0]
                    doc = (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                           and isinstance(first.value.value, str))
                    skip = set(range(first.lineno, first.end_lineno + 1)) if doc else set()
                    out[f"{prefix}.{node.name}"] = [
                        line for n in range(node.lineno, node.end_lineno + 1) if n not in skip
                        if (line := _norm(text[n - 1]))]
                    visit(node.body, f"{prefix}.{node.name}", text)

        visit(ast.parse("\n".join(text)).body, name)
    return out


@cache
def _public_function_names() -> set[str]:
    """Module-level public functions of the topic modules (``step_anatomy``; not methods such as ``update``)."""
    modules = set(_topic_modules())
    return {key.rsplit(".", 1)[1] for key in package_functions()
            if key.rsplit(".", 1)[0] in modules and not _private(key.rsplit(".", 1)[1])}


def _contiguous(fence: list[str], lines: list[str]) -> bool:
    return any(lines[k:k + len(fence)] == fence for k in range(len(lines) - len(fence) + 1))


def fence_problems(cell: str) -> list[str]:
    """What is wrong with the fences of one markdown cell under the rule of this module's docstring."""
    problems = []
    functions = package_functions()
    backticked = set(re.findall(r"`([A-Za-z_]\w*)(?:\(|`)", cell))
    presents = bool(NAMES_PACKAGE.search(cell)) or bool(backticked & _public_function_names())
    for match in FENCE.finditer(cell):
        text = match.group(1)
        first = text.splitlines()[0] if text.strip() else ""
        fence = _code_lines(text)
        if marker := MARKER.match(first.strip()):
            name = marker.group(1)
            if name not in functions:
                problems.append(f"the fence marked {name} names no function of the package")
            elif not _contiguous(fence, functions[name]):
                problems.append(f"the fence marked {name} differs from its code: print it with code_of instead")
            continue
        if not presents or len(fence) < MIN_LINES:
            continue
        best = max(functions, key=lambda key: sum(line in functions[key] for line in fence))
        share = sum(line in functions[best] for line in fence) / len(fence)
        if share >= SHARE and not _contiguous(fence, functions[best]):
            problems.append(f"a fence copies {share:.0%} of the lines of {best} but differs from it (a paraphrase): "
                            "print the code with ampcourse.source.code_of")
    return problems


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_no_markdown_fence_paraphrases_package_code(path):
    found = [f"cell [{i}]: {problem}" for i, source in _cells(path, "markdown") for problem in fence_problems(source)]
    assert not found, f"{path.name}: " + "; ".join(found)


OLD_LESSON_08_CELL = """`ampcourse/ddp_train.py` is what each rank runs.

```python
for i, (x, y) in enumerate(window):
    last = i == len(window) - 1
    with contextlib.nullcontext() if last else model.no_sync():   # model is the DDP wrapper
        with torch.autocast(device_type, dtype=dtype):
            loss = F.mse_loss(model(x).float(), y) / len(window)
        scaler.scale(loss).backward()          # the last one all-reduces (averages) the gradients
scaler.unscale_(optimizer)                     # one GradScaler per process
torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
scaler.step(optimizer)
scaler.update()
```
"""


def test_the_fence_rule_catches_the_old_lesson_08_paraphrase():
    """Lesson 08's fence once paraphrased distributed.train_windows (no hasattr(model, "no_sync"), another autocast
    call): the rule names it, and an exact copy under a marker passes."""
    assert fence_problems(OLD_LESSON_08_CELL) == [
        "a fence copies 70% of the lines of ampcourse.distributed.train_windows but differs from it (a paraphrase): "
        "print the code with ampcourse.source.code_of"]
    from ampcourse.distributed import train_windows
    from ampcourse.source import code_of

    exact = code_of(train_windows, start="for i, (x, y) in enumerate(window):", stop="losses.append")
    marked = f"```python\n# ampcourse.distributed.train_windows\n{exact}\n```"
    assert fence_problems(marked) == []
    assert fence_problems(marked.replace("/ len(window)", "/ 2")) == [
        "the fence marked ampcourse.distributed.train_windows differs from its code: print it with code_of instead"]
    assert fence_problems("```python\n# ampcourse.distributed.no_such_function\nx = 1\n```") == [
        "the fence marked ampcourse.distributed.no_such_function names no function of the package"]


def test_every_topic_module_is_read():
    names = _topic_modules()
    assert {"ampcourse.distributed", "ampcourse.bench.steps", "ampcourse.diagnostics"} <= set(names)
    for name in names:
        importlib.import_module(name)
    assert "ampcourse.scaler_run.step_anatomy" in package_functions()
