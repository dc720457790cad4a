"""Lesson 08's distributed runs accept connections from this machine only (issue 17, "Local and tidy").

torch's ``TCPStore`` server (the rendezvous store torchrun starts) listens on every interface; the course's
launcher (:mod:`ampcourse.torchrun_local`) gives it a socket bound to 127.0.0.1. These tests read the kernel's
socket tables (``/proc/net/tcp``, ``/proc/net/tcp6``) for the listening sockets of the processes involved.
"""

import datetime
import os
import socket
import sys
import threading
import time
from pathlib import Path

import pytest
import torch.distributed as dist

from ampcourse import distributed as d
from ampcourse import torchrun_local

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads Linux's /proc")

LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp's "st" column


def _address(hex_ip: str) -> str:
    """/proc/net/tcp's hex address (little-endian words) as text: 0100007F → 127.0.0.1."""
    raw = bytes.fromhex(hex_ip)
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    return socket.inet_ntop(socket.AF_INET if len(words) == 4 else socket.AF_INET6, words)


def _listening_by_inode() -> dict[int, tuple[str, int]]:
    found = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not Path(table).exists():  # a kernel without IPv6
            continue
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], int(fields[9])
            if state == LISTEN:
                ip, port = local.split(":")
                found[inode] = (_address(ip), int(port, 16))
    return found


def _socket_inodes(pid: int) -> set[int]:
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").glob("*"):
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(int(target[8:-1]))
    return inodes


def listening_sockets(pids) -> list[tuple[int, str, int]]:
    """``(pid, address, port)`` of every TCP socket these processes hold that is listening."""
    table = _listening_by_inode()
    return sorted((pid, *table[inode]) for pid in pids for inode in _socket_inodes(pid) if inode in table)


def _is_loopback(address: str) -> bool:
    return address.startswith("127.") or address in ("::1",) or address.startswith("::ffff:127.")


def test_the_address_decoder_reads_both_tables():
    assert _address("0100007F") == "127.0.0.1"
    assert _address("00000000000000000000000000000000") == "::"
    assert _address("0000000000000000FFFF00000100007F") == "::ffff:127.0.0.1"


def test_torch_s_own_store_listens_everywhere_and_the_loopback_store_does_not():
    # Why the course needs torchrun_local: the plain TCPStore binds the wildcard address although host_name
    # says 127.0.0.1. (If a torch release fixes that, this first assertion fails: then simplify the launcher.)
    plain = dist.TCPStore("127.0.0.1", 0, 1, True, timeout=datetime.timedelta(seconds=10))
    local = torchrun_local.loopback_store(1, timeout=10)
    mine = listening_sockets([os.getpid()])
    plain_addresses = {a for _, a, p in mine if p == plain.port}
    local_addresses = {a for _, a, p in mine if p == local.port}
    assert plain_addresses and not any(_is_loopback(a) for a in plain_addresses), mine
    assert local_addresses == {"127.0.0.1"}, mine
    # ... and it is a working store: a client on the loopback interface reads what the server wrote.
    local.set("key", "value")
    client = dist.TCPStore("127.0.0.1", local.port, 1, False, timeout=datetime.timedelta(seconds=10))
    assert client.get("key") == b"value"


def test_loopback_store_validates_its_arguments():
    with pytest.raises(ValueError, match="world_size must be an int >= 1"):
        torchrun_local.loopback_store(0)
    with pytest.raises(ValueError, match="port must be an int from 0 to 65535"):
        torchrun_local.listen_on_loopback(70000)


@pytest.mark.parametrize(("timeout", "error", "words"), [
    (0, ValueError, r"timeout must be > 0 and finite \(got 0\)"),
    (-1, ValueError, r"timeout must be > 0 and finite \(got -1\)"),
    (float("nan"), ValueError, r"timeout must be > 0 and finite \(got nan\)"),
    (1e300, ValueError, r"timeout must be at most 86400 seconds \(a day; got 1e\+300\)"),
    ("5", TypeError, r"timeout must be a real number > 0 \(got '5'\)"),
    (True, TypeError, r"timeout must be a real number > 0 \(got True\)"),
])
def test_loopback_store_refuses_a_timeout_it_cannot_use(timeout, error, words):
    """Audit r3, finding 29: timeouts 0, negative, NaN or 1e300 raised torch's DistNetworkError or OverflowError."""
    with pytest.raises(error, match=words):
        torchrun_local.loopback_store(1, timeout=timeout)


def test_a_busy_port_is_named():
    """Audit r3, finding 29: a port another program listens on gave a raw ``OSError: [Errno 98]``."""
    taken = torchrun_local.listen_on_loopback(0)
    try:
        port = taken.getsockname()[1]
        with pytest.raises(torchrun_local.PortUnavailable, match=rf"port {port} on 127.0.0.1 cannot be used .*port=0"):
            torchrun_local.loopback_store(1, port=port, timeout=5)
        with pytest.raises(OSError):  # still the OSError bind raised, for code that catches that
            torchrun_local.listen_on_loopback(port)
    finally:
        taken.close()


@pytest.mark.parametrize("given", ["-5", "0", "nan", "soon", "1e300"])
def test_the_rendezvous_refuses_a_bad_timeout_in_its_config(given):
    """Audit r3, finding 29: ``--rdzv-conf timeout=-5`` was accepted by the ampcourse-local rendezvous."""
    from torch.distributed.elastic.rendezvous import RendezvousParameters

    params = RendezvousParameters(torchrun_local.BACKEND, "127.0.0.1:0", "run", 1, 1, timeout=given)
    with pytest.raises(ValueError, match=rf"--rdzv-conf timeout must be a number of seconds > 0 .*\(got '{given}'\)"):
        torchrun_local._create_handler(params)
    params = RendezvousParameters(torchrun_local.BACKEND, "127.0.0.1:0", "run", 1, 1, timeout="30")
    assert torchrun_local._create_handler(params).timeout.total_seconds() == 30


RANK_SCRIPT = """
import os, pathlib, sys, time
import torch, torch.distributed as dist
run_dir = pathlib.Path(sys.argv[1])
dist.init_process_group("gloo")
t = torch.ones(1)
dist.all_reduce(t)  # gloo's connections are up
(run_dir / f"ready{dist.get_rank()}").write_text(str(os.getpid()))
deadline = time.monotonic() + 60
while not (run_dir / "release").exists() and time.monotonic() < deadline:
    time.sleep(0.05)
dist.barrier()
dist.destroy_process_group()
"""


def test_a_live_two_rank_run_listens_on_loopback_only(tmp_path):
    """While a 2-rank gloo run launched by lesson 08's launcher is alive, every listening TCP socket of the
    launcher and its ranks is on 127.0.0.1 (the rendezvous store in torchrun, gloo's pairs in the ranks)."""
    script = tmp_path / "hold.py"
    script.write_text(RANK_SCRIPT)
    run_dir = tmp_path / "run"
    outcome = {}

    def run():
        try:
            outcome["result"] = d.launch(script, nproc=2, args=[str(run_dir)], run_dir=run_dir, timeout=120)
        except BaseException as error:  # noqa: BLE001 - reported by the main thread
            outcome["error"] = error

    thread = threading.Thread(target=run)
    thread.start()
    try:
        deadline = time.monotonic() + 100
        while not all((run_dir / f"ready{r}").exists() for r in range(2)):
            assert thread.is_alive() and time.monotonic() < deadline, f"the run ended early: {outcome}"
            time.sleep(0.1)
        tree = d._descendants(os.getpid())
        sockets = listening_sockets(tree)
    finally:
        (run_dir / "release").parent.mkdir(parents=True, exist_ok=True)
        (run_dir / "release").write_text("")
        thread.join(timeout=120)
    assert "error" not in outcome, outcome.get("error")
    ranks = {int((run_dir / f"ready{r}").read_text()) for r in range(2)}
    assert ranks <= set(tree)
    assert sockets, "found no listening socket at all: the check would prove nothing"
    assert any(pid not in ranks for pid, _, _ in sockets), f"the rendezvous store was not found: {sockets}"
    exposed = [s for s in sockets if not _is_loopback(s[1])]
    assert not exposed, f"listening on more than the loopback interface (pid, address, port): {exposed}"
