"""torchrun on one machine with its rendezvous store listening on 127.0.0.1 only (lesson 08's launcher).

``python -m ampcourse.torchrun_local ARGS`` is ``python -m torch.distributed.run ARGS`` (torchrun) plus one
rendezvous backend, ``--rdzv-backend ampcourse-local``: use it with ``--nnodes 1 --rdzv-endpoint 127.0.0.1:0``.

Why: torchrun's default (``static``) rendezvous starts a ``TCPStore`` server on the master port, and torch's
``TCPStore`` server listens on *every* interface (``::`` or ``0.0.0.0``) whatever ``host_name`` says: the host
is where clients connect, not where the server binds. While a run is alive, anyone on the network could then
read and write the store, unauthenticated. ``TCPStore`` does take an already listening socket
(``master_listen_fd``), and then serves on that socket: this backend binds one to ``127.0.0.1`` itself, with a
port the system picks (no race between choosing a free port and using it), and hands it over. The workers
(``TORCHELASTIC_USE_AGENT_STORE=True``, as with ``static``) only connect to it as clients; gloo's own
connections stay on the loopback interface through ``GLOO_SOCKET_IFNAME=lo``, which
:func:`ampcourse.distributed.launch` sets.
"""

from __future__ import annotations

import datetime
import errno
import socket
import sys
from collections.abc import Sequence

from .validate import as_positive

BACKEND = "ampcourse-local"
LOOPBACK = "127.0.0.1"


def listen_on_loopback(port: int = 0) -> socket.socket:
    """A TCP socket listening on ``127.0.0.1:port`` (``port=0``: one the system picks)."""
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port < 2**16:
        raise ValueError(f"port must be an int from 0 to 65535 (got {port!r})")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((LOOPBACK, port))
        sock.listen(128)
    except OSError as err:
        sock.close()
        if err.errno in (errno.EADDRINUSE, errno.EACCES):
            raise PortUnavailable(f"port {port} on {LOOPBACK} cannot be used ({err.strerror}): another program "
                                  "listens there; pass port=0 to let the system pick a free one") from None
        raise
    return sock


class PortUnavailable(ValueError, OSError):
    """The port asked for is taken (a ``ValueError`` naming it, and still the ``OSError`` that ``bind`` raised)."""


MAX_TIMEOUT = 86_400.0  # seconds: a store timeout beyond a day is a mistake (1e300 overflows timedelta)


def _timeout(name: str, value) -> float:
    """``value`` as a store timeout in seconds: a finite number in (0, :data:`MAX_TIMEOUT`]."""
    seconds = as_positive(name, value)
    if seconds > MAX_TIMEOUT:
        raise ValueError(f"{name} must be at most {MAX_TIMEOUT:g} seconds (a day; got {value!r})")
    return seconds


def loopback_store(world_size: int, *, port: int = 0, timeout: float = 300.0, multi_tenant: bool = True):
    """A ``torch.distributed.TCPStore`` server that listens on ``127.0.0.1`` only (see the module docstring).

    Its ``port`` attribute says where clients connect: ``TCPStore(LOOPBACK, store.port, is_master=False)``.
    """
    import torch.distributed as dist

    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be an int >= 1 (got {world_size!r})")
    timeout = _timeout("timeout", timeout)
    sock = listen_on_loopback(port)
    bound = sock.getsockname()[1]
    # The store owns the socket from here: detach() hands over the descriptor without closing it.
    return dist.TCPStore(LOOPBACK, bound, world_size, True, timeout=datetime.timedelta(seconds=timeout),
                         multi_tenant=multi_tenant, master_listen_fd=sock.detach())


def _create_handler(params):
    """The ``ampcourse-local`` rendezvous: ``static`` (one node, rank 0) with the store on :func:`loopback_store`."""
    from torch.distributed import PrefixStore
    from torch.distributed.elastic.rendezvous import RendezvousInfo, RendezvousStoreInfo
    from torch.distributed.elastic.rendezvous.static_tcp_rendezvous import StaticTCPRendezvous
    from torch.distributed.elastic.rendezvous.utils import parse_rendezvous_endpoint

    host, port = parse_rendezvous_endpoint(params.endpoint or f"{LOOPBACK}:0", 0)
    if host not in (LOOPBACK, "localhost"):
        raise ValueError(f"--rdzv-endpoint must be {LOOPBACK}:PORT for the {BACKEND} backend (got {params.endpoint!r})")
    if params.max_nodes != 1:
        raise ValueError(f"the {BACKEND} rendezvous runs on one machine: use --nnodes 1 (got {params.max_nodes})")
    given = params.config.get("timeout", 600)
    try:
        timeout = _timeout("timeout", float(given) if isinstance(given, str) else given)
    except (TypeError, ValueError):
        raise ValueError(f"--rdzv-conf timeout must be a number of seconds > 0 and at most {MAX_TIMEOUT:g} "
                         f"(got {given!r})") from None

    class LoopbackRendezvous(StaticTCPRendezvous):
        def next_rendezvous(self) -> RendezvousInfo:
            if not self._store:
                self._store = loopback_store(1, port=port, timeout=timeout)
                self.master_port = self._store.port
            return RendezvousInfo(PrefixStore(self.run_id, self._store), 0, 1,
                                  RendezvousStoreInfo(LOOPBACK, self.master_port))

        def get_backend(self) -> str:
            return BACKEND

    return LoopbackRendezvous(LOOPBACK, port, 0, 1, params.run_id, timeout)


def register() -> None:
    """Make ``--rdzv-backend ampcourse-local`` known to torchrun in this process."""
    from torch.distributed.elastic.rendezvous import rendezvous_handler_registry

    rendezvous_handler_registry.register(BACKEND, _create_handler)


def main(argv: Sequence[str] | None = None) -> None:
    register()
    from torch.distributed.run import main as torchrun

    torchrun(list(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    main()
