"""``--workers N``: the supervisor owns the port once, then hands each worker listening sockets of its own.

Usage: ``sockets = open_worker_sockets(["127.0.0.1"], 6379, workers=4)`` (OSError, in the words of a single
process, when the port is taken); worker *i* serves ``sockets[i]``.

Why: every worker used to bind the port itself with SO_REUSEPORT, and SO_REUSEPORT lets any process of the same
user share a port whose sockets all have it. A second ``redisai-server --workers N`` on the same port then started
without a word, and the kernel spread clients over both servers, each with its own store: a SET on one was a nil
on the other. Now the supervisor first binds and listens on the port as a single process does (no
SO_REUSEPORT), which fails with that process's EADDRINUSE message while anything listens there, and only then
makes the workers' SO_REUSEPORT sockets, one per worker, kept for the supervisor's whole life: a worker started
again gets its socket back (connections waiting in its backlog are served by the new worker), and the port is
never left free between a worker's death and its restart. The kernel still spreads connections over the
workers' sockets (SO_REUSEPORT's hash), as before.

What stays open: the check and the first socket are made microseconds apart, so two supervisors started at the
very same instant could both pass; one started while another serves is refused.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable


def bind_error(address: object, exc: OSError) -> OSError:
    """The error a single process prints for a port it cannot bind (asyncio's ``create_server`` words)."""
    reason = (exc.strerror or str(exc)).lower()
    return OSError(exc.errno, f"error while attempting to bind on address {address!r}: {reason}")


def _addresses(hosts: Iterable[str], port: int) -> list[tuple[int, tuple[object, ...]]]:
    """(family, sockaddr) of every address the hosts resolve to, as ``create_server`` binds them."""
    found: list[tuple[int, tuple[object, ...]]] = []
    for host in hosts:
        for family, _type, _proto, _name, sockaddr in socket.getaddrinfo(host or None, port, socket.AF_UNSPEC,
                                                                       socket.SOCK_STREAM, 0, socket.AI_PASSIVE):
            if (family, sockaddr) not in found:
                found.append((family, tuple(sockaddr)))
    return found


def _bound(family: int, sockaddr: tuple[object, ...], reuse_port: bool) -> socket.socket:
    """A listening socket on ``sockaddr`` (SO_REUSEADDR as asyncio sets it; SO_REUSEPORT when asked)."""
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        try:
            sock.bind(sockaddr)
        except OSError as exc:
            raise bind_error(sockaddr, exc) from None
        sock.listen(511)
        sock.set_inheritable(True)
        return sock
    except BaseException:
        sock.close()
        raise


def check_port_free(hosts: Iterable[str], port: int) -> None:
    """Bind and listen on ``port`` without SO_REUSEPORT, then let go: OSError (EADDRINUSE, in a single process's
    words) when any process listens there, SO_REUSEPORT or not."""
    for family, sockaddr in _addresses(hosts, port):
        _bound(family, sockaddr, reuse_port=False).close()


def open_worker_sockets(hosts: list[str], port: int, workers: int) -> list[list[socket.socket]]:
    """``workers`` lists of listening SO_REUSEPORT sockets on ``port`` (one per address of ``hosts``), after
    ``check_port_free``; nothing is left open when it raises."""
    check_port_free(hosts, port)
    made: list[list[socket.socket]] = []
    try:
        for _ in range(workers):
            group: list[socket.socket] = []
            made.append(group)
            for family, sockaddr in _addresses(hosts, port):
                group.append(_bound(family, sockaddr, reuse_port=True))
    except BaseException:
        close_all(made)
        raise
    return made


def close_all(groups: Iterable[Iterable[socket.socket]]) -> None:
    for group in groups:
        for sock in group:
            sock.close()
