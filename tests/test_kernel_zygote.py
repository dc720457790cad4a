"""The suite's kernels are forked from templates that have imported torch (``tests/kernel_zygote.py``): they must
behave as kernels started afresh — the client's working folder and environment, interrupts, kills, exit codes —
and a kernel with other import-time settings, or with the templates turned off, must be an ordinary one."""
import os
import queue
import time

import kernel_zygote
import pytest
from jupyter_client.manager import KernelManager

from ampcourse.course import ROOT

PROBE = ("import os, sys, threading, torch\n"
         "print(os.getcwd(), os.environ.get('ZYGOTE_PROBE'), open(f'/proc/{os.getppid()}/cmdline').read().split('\\0'),"
         " sorted(t.name for t in threading.enumerate()), sys.argv[0].endswith('ipykernel_launcher.py'),"
         " '' in sys.path, sep='|')")


def _run(kc, code: str, timeout: float = 30) -> tuple[str, dict]:
    """stdout of ``code`` in the kernel, and its execute_reply's content."""
    out = []
    reply = kc.execute_interactive(code, timeout=timeout, output_hook=lambda m: out.append(
        m["content"].get("text", "")) if m["msg_type"] == "stream" else None)
    if not out:  # a loaded machine can publish the stream after the idle status: take what comes within 2 s
        deadline = time.time() + 2
        while time.time() < deadline:
            try:
                m = kc.get_iopub_msg(timeout=max(0.01, deadline - time.time()))
            except queue.Empty:
                break
            if m["parent_header"].get("msg_id") == reply["parent_header"]["msg_id"] and m["msg_type"] == "stream":
                out.append(m["content"].get("text", ""))
    return "".join(out), reply["content"]


def _started(cwd, env: dict) -> KernelManager:
    km = KernelManager(kernel_name="python3")
    km.start_kernel(cwd=str(cwd), env={**os.environ, **env})
    return km


def _gone(pid: int, seconds: float) -> bool:
    """Whether process ``pid`` has ended (and been reaped) within ``seconds``."""
    deadline = time.time() + seconds
    while os.path.exists(f"/proc/{pid}") and time.time() < deadline:
        time.sleep(0.1)
    return not os.path.exists(f"/proc/{pid}")


def _forked_kernel(tmp_path, env: dict | None = None, tries: int = 20):
    """A kernel forked from a template: the first one of its settings is ordinary (it starts the template)."""
    for _ in range(tries):
        km = _started(tmp_path, {"ZYGOTE_PROBE": "client's", **(env or {})})
        kc = km.client()
        kc.start_channels()
        kc.wait_for_ready(timeout=60)
        text, _ = _run(kc, PROBE)
        if "serve" in text.split("|")[2]:
            return km, kc, text
        kc.stop_channels()
        km.shutdown_kernel(now=True)
        time.sleep(0.5)
    pytest.fail(f"no kernel of this run came from a template in {tries} tries: {text}")


templates_on = pytest.mark.skipif(not os.path.isdir(os.environ.get(kernel_zygote.DIR_VARIABLE, "")),
                                  reason="kernel templates off (AMPCOURSE_KERNEL_ZYGOTE=off)")
SAME = ("import os, sys, signal, threading, time, torch\n"
        "print(sys.path, sorted(t.name for t in threading.enumerate()), torch.get_num_threads(),"
        " torch.backends.cpu.get_cpu_capability(), signal.pthread_sigmask(signal.SIG_BLOCK, []), time.tzname,"
        " os.getpgid(0) == os.getpid(), sorted(os.sched_getaffinity(0)), sep='|')")
FRESH = "import numpy, torch\nprint(torch.initial_seed(), torch.rand(1).item(), numpy.random.rand())"


def _probe(tmp_path, env: dict, code: str) -> str:
    km = _started(tmp_path, env)
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=60)
        return _run(kc, code)[0]
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


@templates_on
def test_a_forked_kernel_is_one_started_afresh_in_what_it_shows(tmp_path):
    """What a cell can see: the same as a kernel started the ordinary way (sys.path, threads, torch's threads and
    CPU kernels, signal mask, time zone, its own process group), and generators seeded afresh in each kernel."""
    env = {"TZ": "Asia/Tokyo"}
    km, kc, _ = _forked_kernel(tmp_path, env)
    try:
        forked = [_run(kc, SAME)[0], _run(kc, FRESH)[0]]
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    km, kc, _ = _forked_kernel(tmp_path, env)
    try:
        forked_again = _run(kc, FRESH)[0]
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    ordinary = _probe(tmp_path, {**env, kernel_zygote.DIR_VARIABLE: "off"}, SAME)
    assert forked[0] == ordinary and "JST" in ordinary and "|True|" in ordinary
    assert len(set(forked[1].split()) & set(forked_again.split())) == 0, "two forked kernels share torch/numpy seeds"


@templates_on
def test_the_runs_kernels_are_forked_and_take_the_clients_folder_and_environment(tmp_path):
    assert os.path.isdir(os.environ[kernel_zygote.DIR_VARIABLE]), "tests/conftest.py sets the templates' folder"
    km, kc, text = _forked_kernel(tmp_path)
    try:
        cwd, probe, parent, threads, launcher, cwd_on_path = text.strip().split("|")
        assert cwd == str(tmp_path) and probe == "client's"
        assert "'MainThread'" in threads and launcher == "True" and cwd_on_path == "True"
        # an interrupt reaches the kernel through its client
        msg_id = kc.execute("import time; time.sleep(60)", stop_on_error=False)  # the next request is not aborted
        time.sleep(1)
        km.interrupt_kernel()
        reply = kc.get_shell_msg(timeout=20)
        assert reply["parent_header"]["msg_id"] == msg_id and reply["content"]["ename"] == "KeyboardInterrupt"
        after, content = _run(kc, "print('after')")
        assert after.strip() == "after", f"after the interrupt the kernel replied {content}"
        # the kernel's exit code is its client's
        pid = int(_run(kc, "print(os.getpid())")[0])
        kc.execute("os._exit(3)")
        deadline = time.time() + 20
        while km.is_alive() and time.time() < deadline:
            time.sleep(0.1)
        assert not km.is_alive() and km.provisioner.process.returncode == 3
        assert not os.path.exists(f"/proc/{pid}"), "the template reaps its kernel before it reports the exit"
    finally:
        kc.stop_channels()
        km.cleanup_resources()


@templates_on
def test_an_interrupt_and_a_kill_reach_the_kernels_own_children(tmp_path):
    km, kc, _ = _forked_kernel(tmp_path)
    try:
        started = time.time()
        msg_id = kc.execute("import os; os.system('sleep 30')")
        time.sleep(2)
        km.interrupt_kernel()
        while kc.get_shell_msg(timeout=40)["parent_header"]["msg_id"] != msg_id:
            pass
        assert time.time() - started < 20, "the interrupt did not reach the cell's child process"
        child = int(_run(kc, "import subprocess; p = subprocess.Popen(['sleep', '300']); print(p.pid)")[0])
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    assert _gone(child, 10), "a killed kernel's child process outlived it"


MANAGER = """
import os, sys, time
from jupyter_client.manager import KernelManager

from ampcourse.course import ROOT
km = KernelManager(kernel_name="python3")
km.start_kernel(cwd=sys.argv[1])
kc = km.client(); kc.start_channels(); kc.wait_for_ready(timeout=60)
reply = []
kc.execute_interactive("import os; print(os.getpid(), open(f'/proc/{os.getppid()}/cmdline').read())",
                       output_hook=lambda m: reply.append(m["content"].get("text", "")))
print("".join(reply), flush=True)
time.sleep(600)
"""


@templates_on
def test_a_killed_manager_takes_its_forked_kernel_with_it(tmp_path):
    """As ipykernel's parent poller ends an ordinary kernel whose manager died (``grade`` killed by a timeout)."""
    import subprocess
    import sys

    for _ in range(10):
        manager = subprocess.Popen([sys.executable, "-c", MANAGER, str(tmp_path)], stdout=subprocess.PIPE, text=True)
        pid, parent = manager.stdout.readline().split(" ", 1)
        manager.kill()
        manager.wait()
        if "serve" in parent:
            break
        time.sleep(0.5)
    assert "serve" in parent, "no forked kernel in 10 tries"
    assert _gone(pid, 15), "the forked kernel outlived its killed manager"


@templates_on
def test_a_killed_client_takes_its_kernel_with_it(tmp_path):
    km, kc, _ = _forked_kernel(tmp_path)
    pid = int(_run(kc, "print(os.getpid())")[0])
    kc.stop_channels()
    km.shutdown_kernel(now=True)  # SIGKILL to the client's process group
    assert _gone(pid, 10), "the forked kernel outlived its killed client"


@templates_on
def test_a_kernel_killed_by_a_signal_is_reported_so_and_a_killed_template_is_replaced(tmp_path):
    # a template of this test's own (a TORCH* variable is in the key): killing the run's shared one would kill the
    # kernels other workers are grading with
    own = {"TORCH_ZYGOTE_TEST_KEY": str(tmp_path)}
    km, kc, text = _forked_kernel(tmp_path, own)
    template = int(_run(kc, "print(os.getppid())")[0])
    kc.execute("os.kill(os.getpid(), 9)")
    deadline = time.time() + 20
    while km.is_alive() and time.time() < deadline:
        time.sleep(0.1)
    assert km.provisioner.process.returncode == -9, "a SIGKILLed kernel's client must end by SIGKILL too"
    kc.stop_channels()
    km.cleanup_resources()
    os.kill(template, 9)  # the OOM killer, say: the next kernels get a new template, not ordinary ones for good
    km, kc, _ = _forked_kernel(tmp_path, own)
    try:
        assert int(_run(kc, "print(os.getppid())")[0]) != template
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def test_the_key_holds_the_process_settings_and_only_a_private_folder_is_asked(tmp_path):
    settings = kernel_zygote.process_settings()
    other = [settings[0], settings[1] + 5, *settings[2:]]
    assert kernel_zygote.template_key({}, "py", settings) != kernel_zygote.template_key({}, "py", other)
    relative = {"PYTHONPATH": "sub"}
    assert kernel_zygote.template_key(relative, "py", settings, "/a") != kernel_zygote.template_key(
        relative, "py", settings, "/b")
    assert kernel_zygote.template_key({}, "py", settings, "/a") == kernel_zygote.template_key({}, "py", settings, "/b")
    folder = tmp_path / "templates"
    folder.mkdir(mode=0o700)
    (folder / "owner").write_text("1")
    assert kernel_zygote._own_private_folder(str(folder))
    folder.chmod(0o755)
    assert not kernel_zygote._own_private_folder(str(folder)), "a folder others can read is not asked"
    assert not kernel_zygote._own_private_folder("templates"), "nor a relative path"


def test_other_import_time_settings_or_off_give_an_ordinary_kernel(tmp_path):
    # a setting torch reads on import: never a template of other settings (the first such kernel is ordinary)
    assert kernel_zygote.template_key({"OMP_NUM_THREADS": "1"}, "py") != kernel_zygote.template_key({}, "py")
    assert kernel_zygote.template_key({"PYTEST_CURRENT_TEST": "x"}, "py") == kernel_zygote.template_key({}, "py")
    km = _started(tmp_path, {kernel_zygote.DIR_VARIABLE: "off"})
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=60)
        text, _ = _run(kc, PROBE)
        assert "serve" not in text.split("|")[2], "with the templates off a kernel is an ordinary process"
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


@templates_on
def test_nbvals_own_kernels_are_forked_too(tmp_path):
    """pyproject's ``--nbval-current-env`` would have nbval build ipykernel's kernelspec and start every lesson's
    and exercise's kernel afresh; ``ampcourse.pytest_plugin`` asks nbval for the suite's ``python3`` kernel instead."""
    import subprocess
    import sys

    import nbformat

    from ampcourse import pytest_plugin

    assert pytest_plugin.SUITE_KERNELS == kernel_zygote.DIR_VARIABLE
    km, kc, _ = _forked_kernel(tmp_path)  # this run's template of these settings is up
    kc.stop_channels()
    km.shutdown_kernel(now=True)
    found = tmp_path / "parent.txt"
    code = f"import os\nopen({str(found)!r}, 'w').write(open(f'/proc/{{os.getppid()}}/cmdline').read())"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)]), tmp_path / "probe.ipynb")
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                          "--rootdir", str(tmp_path), "--nbval-lax", "--nbval-current-env", "probe.ipynb"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "serve" in found.read_text().split("\0"), "nbval's kernel was started afresh, not forked"


def test_a_solution_that_trains_passes_grade_on_ordinary_kernels(tmp_path, monkeypatch):
    """The templates import ``torch._dynamo``; an ordinary kernel (a learner's) imports it in the middle of the run,
    at its first optimizer (it wraps ``torch.manual_seed``; optimizer methods cache their ``__dynamo_disable``). On
    ordinary kernels, that import is no change of the grader either: exercise 04's solution passes every task."""
    import re
    import shutil

    from ampcourse.grading import grade

    monkeypatch.setenv(kernel_zygote.DIR_VARIABLE, "off")
    (tmp_path / "exercises").mkdir()
    shutil.copytree(ROOT / "solutions", tmp_path / "solutions")
    name = "04_gradscaler.ipynb"
    shutil.copy(ROOT / "solutions" / name, tmp_path / "exercises" / name)
    table, code = grade([str(tmp_path / "exercises" / name)], root=tmp_path)
    assert code == 0 and re.search(r"04_gradscaler\s+(\d+)/\1\s+passed", table), table
