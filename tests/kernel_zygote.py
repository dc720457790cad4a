"""Kernels for the test suite that start without paying ``import torch`` each time (issue 26).

A kernel costs about 3 s of CPU before it runs its first cell, most of it ``import torch``, and the suite starts
hundreds of them (every grader test grades in a fresh kernel). ``tests/conftest.py`` points the ``python3``
kernelspec of everything the suite starts (nbval, ``grade``, nbclient, JupyterLab, inner ``pytest`` runs) at this
file, as the client of a fork server:

* ``kernel_zygote.py -f CONNECTION_FILE`` (the client, started by jupyter_client as "the kernel"): asks the
  template for its settings to fork a kernel, then stands in for it: signals it receives (an interrupt, a
  terminate) go to the kernel, and it exits as the kernel exits (with its code, or by its signal). If it is
  killed, the template kills the kernel. Where there is no template yet, it starts one in the background and runs
  this kernel the ordinary way (``exec python -m ipykernel_launcher``).
* ``kernel_zygote.py serve DIR KEY`` (a template): imports torch, numpy and ipykernel once, then forks one kernel
  per request. The child takes the client's environment, working folder, standard streams and arguments and runs
  ipykernel's launcher as ``python -m ipykernel_launcher`` would; it is a fresh process in every other way
  (a new PID, no threads, nothing run but the imports).

What is not the same as a kernel started afresh, and why that is safe: modules are imported before the learner's
code rather than by it (the same modules, from the same files); the environment variables those imports read
are part of the template's key (``_KEY_PREFIXES``: a kernel with other ``OMP_*``, ``ATEN_*``, ``PYTHON*`` … gets a
template of its own, started with those), as is the interpreter. The second pass of ``./course test`` (lessons and
solutions under other CPU kernels) and every learner's run use ordinary kernels: this file is only used where
``tests/conftest.py`` sets ``AMPCOURSE_KERNEL_ZYGOTE``.
"""
import hashlib
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import time

DIR_VARIABLE = "AMPCOURSE_KERNEL_ZYGOTE"
# The environment variables that what a template imports reads at import time (OpenMP and oneDNN read theirs when
# the library loads): a kernel whose values differ gets its own template.
_KEY_PREFIXES = ("OMP_", "GOMP_", "KMP_", "MKL", "OPENBLAS", "ATEN_", "DNNL_", "ONEDNN_", "TORCH", "PYTORCH",
                 "CUDA", "NVIDIA", "LD_", "PYTHON", "NUMPY", "MPL", "MATPLOTLIB", "LANG", "LC_", DIR_VARIABLE)
_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)


def template_key(env: dict, executable: str) -> str:
    """The template a kernel with this environment and interpreter can be forked from (and this file's text)."""
    with open(__file__, "rb") as f:
        text = f.read()
    parts = [executable, hashlib.sha256(text).hexdigest()]
    parts += [f"{k}={v}" for k, v in sorted(env.items()) if k.startswith(_KEY_PREFIXES)]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def _send(conn: socket.socket, message: dict, fds: list[int] = ()) -> None:
    data = json.dumps(message).encode() + b"\n"
    if fds:
        socket.send_fds(conn, [data], list(fds))
    else:
        conn.sendall(data)


def _lines(conn: socket.socket):
    """The JSON messages on ``conn``, one per line, until it closes."""
    buffer = b""
    while True:
        try:
            chunk = conn.recv(65536)
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


def _start_template(folder: str, key: str) -> None:
    """Start the template for ``key`` in the background, once (the first client to take its lock starts it)."""
    try:
        fd = os.open(os.path.join(folder, key + ".lock"), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except OSError:
        return
    os.close(fd)
    subprocess.Popen([sys.executable, __file__, "serve", folder, key], cwd=folder, stdin=subprocess.DEVNULL,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def client(argv: list[str]) -> None:
    folder = os.environ.get(DIR_VARIABLE, "")
    if not folder or not os.path.isdir(folder):
        _ordinary_kernel(argv)
    key = template_key(dict(os.environ), sys.executable)
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(os.path.join(folder, key + ".sock"))
    except OSError:
        conn.close()
        _start_template(folder, key)
        _ordinary_kernel(argv)
    _send(conn, {"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ)}, [0, 1, 2])
    messages = _lines(conn)
    first = next(messages, None)
    if not first or "pid" not in first:
        conn.close()
        _ordinary_kernel(argv)
    pid = first["pid"]

    def forward(signum, frame):
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass

    for s in _SIGNALS:
        signal.signal(s, forward)
    status = next(messages, None)
    if status is None:  # the template went away: so did the kernel (it dies with its template)
        sys.exit(1)
    if status.get("signal"):
        for s in _SIGNALS:
            signal.signal(s, signal.SIG_DFL)
        os.kill(os.getpid(), status["signal"])
        time.sleep(1)
    sys.exit(status.get("code", 1))


# --- the template: imports once, forks a kernel per request -------------------------------------------------------

def _die_with_parent() -> None:
    """Linux: this process gets SIGKILL when the template that forked it exits."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


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
    import ipykernel.kernelapp  # noqa: F401
    import numpy  # noqa: F401
    import torch  # noqa: F401  (the point: imported once, here)
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
    while _wanted(folder, owner):
        for event, _ in selector.select(timeout=1.0):
            what = event.data
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
                if template_key(request["env"], sys.executable) != key or len(fds) != 3:
                    for fd in fds:
                        os.close(fd)
                    _send(conn, {"refused": "other settings"})
                    conn.close()
                    continue
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
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
    for pid in kernels:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return None


def run_kernel(request: dict) -> None:
    """In the forked child: become the kernel ``python -m ipykernel_launcher ARGV`` in the client's settings."""
    _die_with_parent()
    for s in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(s, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    if "numpy.random" in sys.modules:  # a fresh process seeds numpy's global generator afresh; a fork would share it
        sys.modules["numpy.random"].seed()
    if "tempfile" in sys.modules:  # the temporary folder is looked up again, in the client's environment
        sys.modules["tempfile"].tempdir = None
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
