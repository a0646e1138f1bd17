"""Who called: the direct peer, or, behind a trusted reverse proxy, the address it names in X-Forwarded-For.

RELAY_TRUSTED_PROXIES (CIDRs) lists the proxies whose X-Forwarded-For is believed. A request whose direct peer
is not one of them keeps its peer's address, whatever it sends: a forged header from elsewhere changes nothing.
From a trusted peer, X-Forwarded-For is read from the right (each proxy appends the address it got the request
from): the first address that is not itself a trusted proxy is the caller; every hop to its left was written by
the caller, so it is never believed. `relay serve` puts the result in REMOTE_ADDR (web/transport/handler.py), which the
audit log's `sourceIp` and the per-address limits (web/transport/limits.py, web/transport/websocket.py) read.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from relay.actors.configuration.settings import Network

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def _address(text: str) -> Address | None:
    """An address as a proxy writes it: plain, "[v6]" or "[v6]:port", or "v4:port"; None if it is none."""
    text = text.strip()
    if text.startswith("["):
        text = text[1:].split("]", 1)[0]
    elif text.count(":") == 1:
        text = text.split(":", 1)[0]
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


class TrustedProxies:
    def __init__(self, networks: Iterable[Network] = ()) -> None:
        self.networks = tuple(networks)

    def __bool__(self) -> bool:
        return bool(self.networks)

    def trusts(self, address: Address | None) -> bool:
        return address is not None and any(address in network for network in self.networks)

    def client(self, peer: str, forwarded_for: str | None) -> str:
        """The caller's address: `peer` unless it is a trusted proxy that says whom it forwards for."""
        if not self.networks or not forwarded_for or not self.trusts(_address(peer)):
            return peer
        caller = peer
        for hop in reversed(forwarded_for.split(",")):
            address = _address(hop)
            if address is None:
                break  # garbage: the nearest hop we could vouch for is the caller
            caller = str(address)
            if not self.trusts(address):
                break
        return caller
