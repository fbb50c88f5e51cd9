"""Who the client is, when a reverse proxy stands between it and the server.

A proxy says so in ``X-Forwarded-For`` (and sets ``X-Forwarded-Proto`` and the like). Anyone can
send those headers, so they are believed only from a peer the operator named
(``--forwarded-allow-ips``, none by default): from it, the client is the last address it reports
that is not itself a named proxy; from any other peer the headers are dropped before the app, the
login throttle or Gradio's URL building can read them. Uvicorn is told to believe none itself, so
this is the one place the decision is made.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any

#: Request headers a proxy sets about the client; believed only from a named proxy.
FORWARDING_HEADERS = (b"x-forwarded-for", b"x-forwarded-proto", b"x-forwarded-host", b"x-forwarded-port",
                      b"x-forwarded-prefix", b"x-real-ip", b"forwarded")

Scope = dict[str, Any]

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_proxies(text: str | None) -> tuple[IPNetwork, ...]:
    """The proxies named by ``--forwarded-allow-ips``: addresses or networks, comma-separated.

    Raises ValueError naming the first entry that is neither (the caller words the message)."""
    networks = []
    for entry in (text or "").split(","):
        entry = entry.strip()
        if entry:
            networks.append(ipaddress.ip_network(entry, strict=False))
    return tuple(networks)


def _address(text: str) -> str | None:
    """The IP address in one ``X-Forwarded-For`` entry (``1.2.3.4``, ``1.2.3.4:80``, ``[::1]:80``), or None."""
    text = text.strip()
    if text.startswith("["):
        text = text[1:].partition("]")[0]
    elif text.count(":") == 1:
        text = text.partition(":")[0]
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        return None


@dataclass(frozen=True)
class ForwardedTrust:
    """Which peers may say, in forwarding headers, who the client is (none unless named)."""

    proxies: tuple[IPNetwork, ...] = ()

    def trusts(self, host: str | None) -> bool:
        if not host or not self.proxies:
            return False
        try:
            ip = ipaddress.ip_address(host)
        except ValueError:
            return False
        return any(ip in net for net in self.proxies)

    def client(self, peer: str | None, forwarded_for: str) -> str | None:
        """The client behind a named proxy: the last ``X-Forwarded-For`` entry that is not itself a named
        proxy (each proxy appends the address it saw, so entries to its left are the client's own claims).
        None when the header names no usable address."""
        if not self.trusts(peer):
            return None
        entries = [e for e in forwarded_for.split(",") if e.strip()]
        for entry in reversed(entries):
            address = _address(entry)
            if address is None:
                return None
            if not self.trusts(address):
                return address
        return _address(entries[0]) if entries else None


def apply_forwarding(scope: Scope, trust: ForwardedTrust) -> Scope:
    """``scope`` with the client (and scheme) a named proxy reports; from any other peer, without the
    forwarding headers at all, so nothing downstream (the login throttle, Gradio's URL building) reads them."""
    headers = scope.get("headers") or []
    if not any(name in FORWARDING_HEADERS for name, _ in headers):
        return scope
    peer = (scope.get("client") or (None, 0))[0]
    if not trust.trusts(peer):
        return {**scope, "headers": [(k, v) for k, v in headers if k not in FORWARDING_HEADERS]}
    scope = dict(scope)
    forwarded_for = b", ".join(v for k, v in headers if k == b"x-forwarded-for").decode("latin-1")
    client = trust.client(peer, forwarded_for) if forwarded_for else None
    if client is not None:
        scope["client"] = (client, 0)
    proto = next((v.decode("latin-1").strip().lower() for k, v in headers if k == b"x-forwarded-proto"), "")
    if proto in ("http", "https", "ws", "wss"):
        scope["scheme"] = proto.replace("http", "ws") if scope.get("type") == "websocket" else proto
    return scope
