"""Ports on this machine: what the local cluster, the Spark pipeline's standalone cluster and the tests
bind their listeners to."""

from __future__ import annotations

import socket


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """`count` distinct ports the kernel calls free on `host`. Every socket stays bound until all are
    chosen: asked one at a time, the kernel may hand the same just-closed port out twice (CI saw
    brokers 2 and 3 both given 57219)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind((host, 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()
