"""Kernels for the test suite that start without paying ``import torch`` each time (issue 26).

A kernel costs about 3 s of CPU before it runs its first cell, most of it ``import torch``, and the suite starts
hundreds of them (every grader test grades in a fresh kernel). ``tests/conftest.py`` points the ``python3``
kernelspec of everything the suite starts (nbval, ``grade``, nbclient, JupyterLab, inner ``pytest`` runs) at this
file, as the client of a fork server:

* ``kernel_zygote.py -f CONNECTION_FILE`` (the client, started by jupyter_client as "the kernel"): asks the
  template for its settings to fork a kernel, then stands in for it: signals it receives (an interrupt, a
  terminate) go to the kernel's process group, and it exits as the kernel exits (with its code, or by its signal).
  If it is killed, the template kills the kernel's group; if the process that started it (the kernel's manager)
  dies, it kills the kernel, as ipykernel's parent poller ends an ordinary one. Where there is no template yet (or
  only a dead one's lock), it starts one in the background and runs this kernel the ordinary way
  (``exec python -m ipykernel_launcher``).
* ``kernel_zygote.py serve DIR KEY`` (a template): imports torch, numpy and ipykernel (with its debugger) once, then
  forks one kernel per request. The child takes the client's environment, working folder, standard streams and
  arguments, leads a process group of its own, re-seeds torch's and numpy's generators and runs ipykernel's launcher
  as ``python -m ipykernel_launcher`` would; it is a fresh process in every other way but the ones below (a new PID,
  no threads, nothing run but the imports). A template with no kernel and no request for :data:`IDLE` seconds exits
  (a key used once, a test's own ``PYTHONPATH``, does not hold its memory for the rest of the run).

What is not the same as a kernel started afresh, and why that is safe: modules are imported before the learner's
code rather than by it (the same modules, from the same files; ``torch._dynamo`` too, which an ordinary kernel
imports at its first optimizer: ``tests/test_kernel_zygote.py`` grades a solution on ordinary kernels as well); the
environment variables those imports read are part of the template's key (``_KEY_PREFIXES``: a kernel with other
``OMP_*``, ``ATEN_*``, ``PYTHON*``, ``TZ`` … gets a template of its own, started with those), as are the interpreter
and the process settings a child inherits (:func:`process_settings`: CPU affinity, niceness, umask, resource
limits). The string hash seed is the template's (every kernel of a template iterates a set of strings in one order:
set ``PYTHONHASHSEED`` to compare), and the kernel's command line in ``ps`` is the template's. The second pass of
``./course test`` (lessons and solutions under other CPU kernels) and every learner's run use ordinary kernels: this
file is only used where ``tests/conftest.py`` sets ``AMPCOURSE_KERNEL_ZYGOTE`` (to a private folder of this user's;
``off``: ordinary).
"""
import hashlib
import itertools
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time

DIR_VARIABLE = "AMPCOURSE_KERNEL_ZYGOTE"
# The environment variables that what a template imports reads at import time (OpenMP and oneDNN read theirs when
# the library loads): a kernel whose values differ gets its own template.
_KEY_PREFIXES = ("OMP_", "GOMP_", "KMP_", "MKL", "OPENBLAS", "ATEN_", "DNNL_", "ONEDNN_", "TORCH", "PYTORCH",
                 "CUDA", "NVIDIA", "LD_", "PYTHON", "NUMPY", "MPL", "MATPLOTLIB", "LANG", "LC_", "TZ", DIR_VARIABLE)
_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
_WATCH = 1.0  # seconds between a client's looks at whether the process that started it is still there
IDLE = 120.0  # seconds a template with no kernel waits for a request before it exits (its memory back)
_first_thread_name = 1  # set by serve(): the number of the first "Thread-N" name a kernel gives


def process_settings() -> list:
    """What a process hands its children besides its environment and reads at import (torch sizes its thread
    pool from the CPUs it may use): CPU affinity, niceness, umask, resource limits. A kernel asked for with other
    settings gets a template of its own, started with them (it inherits them from the client that starts it)."""
    import resource

    umask = os.umask(0)
    os.umask(umask)
    limits = [resource.getrlimit(getattr(resource, n)) for n in sorted(dir(resource)) if n.startswith("RLIMIT_")]
    affinity = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return [affinity, os.getpriority(os.PRIO_PROCESS, 0), umask, limits]


def template_key(env: dict, executable: str, settings: list | None = None, cwd: str = "") -> str:
    """The template a kernel with this environment, interpreter and process settings (:func:`process_settings`)
    can be forked from (and this file's text); and its working folder where ``PYTHONPATH`` holds a relative entry
    (the template, started there, resolves it as the kernel would)."""
    with open(__file__, "rb") as f:
        text = f.read()
    relative = any(p and not os.path.isabs(p) for p in env.get("PYTHONPATH", "").split(os.pathsep))
    parts = [executable, hashlib.sha256(text).hexdigest(), json.dumps(settings), cwd if relative else ""]
    parts += [f"{k}={v}" for k, v in sorted(env.items()) if k.startswith(_KEY_PREFIXES)]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def _send(conn: socket.socket, message: dict, fds: list[int] = ()) -> None:
    data = json.dumps(message).encode() + b"\n"
    if fds:
        socket.send_fds(conn, [data], list(fds))
    else:
        conn.sendall(data)


def _lines(conn: socket.socket, still_wanted=None):
    """The JSON messages on ``conn``, one per line, until it closes (or, where given, until ``still_wanted()``,
    asked every :data:`_WATCH` seconds of silence, says False)."""
    buffer = b""
    conn.settimeout(_WATCH if still_wanted else None)
    while True:
        try:
            chunk = conn.recv(65536)
        except TimeoutError:
            if still_wanted():
                continue
            return
        except OSError:
            return
        if not chunk:
            return
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            yield json.loads(line)


# --- the client: what jupyter_client starts as the kernel --------------------------------------------------------

def _ordinary_kernel(argv: list[str]) -> None:
    os.execv(sys.executable, [sys.executable, "-m", "ipykernel_launcher", *argv])


def _lock_holder_gone(lock: str) -> bool:
    """Whether the template that took ``lock`` has died (its pid, written in the lock, is no process) after it
    served (its socket is there; a template idle too long removes both): a killed template must not turn the rest
    of the run into ordinary kernels, and one that fails at start-up is not started again and again (its failure
    is in ``templates.log``, which the run's summary shows)."""
    if not os.path.exists(lock[:-len(".lock")] + ".sock"):
        return False
    try:
        with open(lock) as f:
            pid = int(f.read() or 0)
    except (OSError, ValueError):
        return False
    if not pid:
        return time.time() - os.path.getmtime(lock) > 60  # a starter that died before writing it
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass
    return False


def _start_template(folder: str, key: str) -> None:
    """Start the template for ``key`` in the background, once (the first client to take its lock starts it; the
    lock holds the template's pid, and a dead template's lock is taken over). What fails is logged in
    ``templates.log`` of the folder."""
    lock = os.path.join(folder, key + ".lock")
    if _lock_holder_gone(lock):
        for stale in (lock, os.path.join(folder, key + ".sock")):
            try:
                os.unlink(stale)
            except OSError:
                pass
    try:
        fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except OSError:
        return
    starter = os.fork()  # started by a child that exits at once: the template is no child of this kernel-to-be
    if starter:
        os.close(fd)
        os.waitpid(starter, 0)
        return
    try:
        with open(os.path.join(folder, "templates.log"), "ab") as log:
            template = subprocess.Popen([sys.executable, __file__, "serve", folder, key], cwd=os.getcwd(),
                                        stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
        os.write(fd, str(template.pid).encode())
    finally:
        os._exit(0)


def _own_private_folder(folder: str) -> bool:
    """``folder`` is an absolute path to a folder of this user's that no one else can read or write, made by a run
    of the suite (it holds ``owner``): nothing else is asked for a kernel (nor sent this environment)."""
    try:
        info = os.stat(folder)
    except OSError:
        return False
    return (os.path.isabs(folder) and os.path.isfile(os.path.join(folder, "owner")) and info.st_uid == os.getuid()
            and info.st_mode & 0o077 == 0)


def _kill_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def client(argv: list[str]) -> None:
    parent = os.getppid()  # the kernel's manager: a kernel outlives it no more than an ordinary one does
    folder = os.environ.get(DIR_VARIABLE, "")
    if folder == "off" or not _own_private_folder(folder):
        _ordinary_kernel(argv)
    settings = process_settings()
    key = template_key(dict(os.environ), sys.executable, settings, os.getcwd())
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(os.path.join(folder, key + ".sock"))
    except OSError:
        conn.close()
        _start_template(folder, key)
        _ordinary_kernel(argv)
    _send(conn, {"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ), "settings": settings}, [0, 1, 2])
    messages = _lines(conn, still_wanted=lambda: os.getppid() == parent)
    first = next(messages, None)
    if os.getppid() != parent:
        sys.exit(1)
    if not first or "pid" not in first:
        conn.close()
        _ordinary_kernel(argv)
    pid = first["pid"]  # the kernel leads a process group of its own: signals reach its children too

    for s in _SIGNALS:
        signal.signal(s, lambda signum, frame: _kill_group(pid, signum))
    status = next(messages, None)
    if status is None:  # the template went away (so did the kernel), or the manager did: end the kernel with it
        _kill_group(pid, signal.SIGKILL)
        sys.exit(1)
    if status.get("signal"):
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # the kernel's crash, not a core file of this client
        for s in {*_SIGNALS, status["signal"]} - {signal.SIGKILL, signal.SIGSTOP}:  # those two cannot be caught
            signal.signal(s, signal.SIG_DFL)
        os.kill(os.getpid(), status["signal"])
        time.sleep(1)
    sys.exit(status.get("code", 1))


# --- the template: imports once, forks a kernel per request -------------------------------------------------------

def _die_with_parent(template: int) -> None:
    """Linux: this process gets SIGKILL when the template that forked it exits."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != template:  # the template died before the line above took effect
        os._exit(1)


def _wanted(folder: str, owner: int) -> bool:
    """Whether the run that made ``folder`` is still on (a run killed before its clean-up leaves no template)."""
    try:
        os.kill(owner, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return os.path.isdir(folder)


def serve(folder: str, key: str) -> dict | None:
    """Serve requests until ``folder`` is removed or the run that made it has ended. Returns, in a forked child
    only, the request it must run."""
    with open(os.path.join(folder, "owner")) as f:
        owner = int(f.read())
    global _first_thread_name
    _first_thread_name = threading._counter()  # "Thread-N" of the next unnamed thread (run_kernel puts it back)
    os.environ["PYDEVD_DISABLE_FILE_VALIDATION"] = "1"  # pydevd's note on frozen modules, in every run's summary
    import ipykernel.debugger  # noqa: F401  (debugpy and pydevd: 0.28 s of a kernel's start-up, imported there anyway)
    del os.environ["PYDEVD_DISABLE_FILE_VALIDATION"]
    import ipykernel.kernelapp  # noqa: F401
    import numpy  # noqa: F401
    import psutil  # noqa: F401  (ipykernel's, at start-up too)
    import torch  # noqa: F401  (the point: imported once, here)

    # What a course notebook's first optimizer imports (any torch._disable_dynamo function: Optimizer.__init__,
    # zero_grad, torch.manual_seed once it is imported): 1.5-2 s of CPU in each kernel that trains; the graded batch
    # of tests/test_pytest_plugin.py took 186 s without it and 154 s with it
    import torch._dynamo  # noqa: F401
    path = os.path.join(folder, key + ".sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path + ".new")
    listener.listen(64)
    os.replace(path + ".new", path)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *a: None)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, "accept")
    selector.register(wake_r, selectors.EVENT_READ, "child")
    kernels: dict[int, socket.socket] = {}  # pid -> its client's connection
    last = time.monotonic()
    while _wanted(folder, owner) and (kernels or time.monotonic() - last < IDLE):
        for event, _ in selector.select(timeout=1.0):
            what = event.data
            last = time.monotonic()
            if what == "accept":
                conn, _ = listener.accept()
                conn.settimeout(10)
                try:
                    data, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
                    while not data.endswith(b"\n"):
                        more = conn.recv(1 << 20)
                        if not more:
                            raise OSError("closed")
                        data += more
                    request = json.loads(data)
                except (OSError, ValueError):
                    conn.close()
                    continue
                conn.settimeout(None)
                if (template_key(request["env"], sys.executable, request.get("settings"), request["cwd"]) != key
                        or len(fds) != 3):
                    for fd in fds:
                        os.close(fd)
                    _send(conn, {"refused": "other settings"})
                    conn.close()
                    continue
                request["template"] = os.getpid()
                pid = os.fork()
                if pid == 0:
                    signal.set_wakeup_fd(-1)
                    selector.close()
                    for fd in (wake_r, wake_w, listener.fileno(), conn.fileno(),
                               *(c.fileno() for c in kernels.values())):
                        try:
                            os.close(fd)
                        except OSError:
                            pass
                    for target, fd in enumerate(fds):
                        os.dup2(fd, target)
                        os.close(fd)
                    return request
                for fd in fds:
                    os.close(fd)
                try:
                    os.setpgid(pid, pid)  # as the child does: the group exists when its pid is sent
                except OSError:
                    pass
                kernels[pid] = conn
                selector.register(conn, selectors.EVENT_READ, pid)
                try:
                    _send(conn, {"pid": pid})
                except OSError:  # the client went away meanwhile: its closed connection kills the kernel below
                    pass
            elif what == "child":
                os.read(wake_r, 4096)
                while True:
                    try:
                        pid, status = os.waitpid(-1, os.WNOHANG)
                    except ChildProcessError:
                        break
                    if pid == 0:
                        break
                    conn = kernels.pop(pid, None)
                    if conn is None:
                        continue
                    try:
                        selector.unregister(conn)
                    except KeyError:  # its client is gone already
                        pass
                    message = ({"signal": os.WTERMSIG(status)} if os.WIFSIGNALED(status)
                               else {"code": os.WEXITSTATUS(status)})
                    try:
                        _send(conn, message)
                    except OSError:
                        pass
                    conn.close()
            else:  # a client's connection: readable means it closed (it was killed): so is its kernel
                pid = what
                selector.unregister(kernels[pid])
                _kill_group(pid, signal.SIGKILL)
    for pid in kernels:
        _kill_group(pid, signal.SIGKILL)
    for gone in (path, os.path.join(folder, key + ".lock")):  # the next kernel of this key starts a template again
        try:
            os.unlink(gone)
        except OSError:
            pass
    return None


def run_kernel(request: dict) -> None:
    """In the forked child: become the kernel ``python -m ipykernel_launcher ARGV`` in the client's settings."""
    os.setpgid(0, 0)  # its own process group, as the kernel of a fresh start is: its client signals the group
    _die_with_parent(request["template"])
    for s in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(s, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    time.tzset()
    # A fresh process seeds torch's and numpy's global generators from entropy; a fork would share the template's
    # (Python's ``random`` re-seeds itself after a fork).
    if "torch" in sys.modules:
        sys.modules["torch"].seed()
    if "numpy.random" in sys.modules:
        sys.modules["numpy.random"].seed()
    if "tempfile" in sys.modules:  # the temporary folder is looked up again, in the client's environment
        sys.modules["tempfile"].tempdir = None
    # ipykernel's debugger makes an unnamed Thread object at import: names count on from where a fresh process's do
    threading._counter = itertools.count(_first_thread_name).__next__
    import ipykernel_launcher
    sys.argv = [ipykernel_launcher.__file__, *request["argv"]]
    from ipykernel import kernelapp
    kernelapp.launch_new_instance()


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        # sys.path as ``python -m ipykernel_launcher`` has it once the launcher has taken the working folder off
        sys.path.pop(0)
        request = serve(sys.argv[2], sys.argv[3])
        if request is None:
            sys.exit(0)
        run_kernel(request)
    else:
        client(sys.argv[1:])
