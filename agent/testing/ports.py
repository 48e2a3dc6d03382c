"""Loopback ports for the tests, the bench and the test doubles, without port races.

A port that was merely free when asked for can be taken by another server (another test's,
another process's) before it is used: a double serving there fails to bind, and an address
meant to refuse connections is answered. So a server here binds its socket first and serves
on it; an address that must refuse holds its port bound, never listening, while it is used;
and only a port handed by number to another process (redis-server, postgres, livekit-server)
is probed and released."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager


def loopback_socket(host: str = "127.0.0.1", port: int = 0) -> socket.socket:
    """A socket bound to `host`:`port` (a port of its own when 0), for a server to serve on."""
    sock = socket.socket()
    sock.bind((host, port))
    return sock


def port_of(sock: socket.socket) -> int:
    return sock.getsockname()[1]


def free_port() -> int:
    """A loopback port nothing listens on, for another process that binds it by number
    (the probe socket is closed when this returns)."""
    with loopback_socket() as s:
        return port_of(s)


@contextmanager
def refused_port() -> Iterator[int]:
    """A loopback port that refuses connections until the block ends: bound, never listened
    on, so nothing else can serve there meanwhile."""
    with loopback_socket() as held:
        yield port_of(held)
