"""The sockets of `relay serve`'s ports that the gevent server does not make itself: a worker's two (the shared
public port with SO_REUSEPORT, and its own for peers), and the check that the public port is free."""

from __future__ import annotations

import socket

from relay.actors.configuration.settings import Settings


def address_family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def port_refusal(host: str, port: int) -> str | None:
    """Why the public port cannot be ours, or None: bound without SO_REUSEPORT, so any listener there (another
    `relay serve`, with workers or not) makes it fail, instead of the kernel sharing the port with it."""
    with socket.socket(address_family(host), socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as error:
            return error.strerror or type(error).__name__
    return None


def worker_sockets(settings: Settings) -> tuple[socket.socket, socket.socket]:
    """A worker's two sockets: the public port, bound with SO_REUSEPORT (not listening yet: the kernel would
    queue connections for a worker that is still starting), and its own port, listening, where peers reach it."""
    public = socket.socket(address_family(settings.host), socket.SOCK_STREAM)
    private = socket.socket(address_family(settings.host), socket.SOCK_STREAM)
    try:
        public.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        public.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        public.bind((settings.host, settings.port))
        private.bind((settings.host, 0))
        private.listen(socket.SOMAXCONN)
    except OSError:
        public.close()
        private.close()
        raise
    return public, private
