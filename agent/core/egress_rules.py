"""Which network addresses a sandbox's traffic may reach, decided after DNS resolution.

The server resolves a name itself and checks every address it got: loopback, private,
link-local (cloud metadata lives there), multicast, unspecified, reserved and shared
(carrier-grade NAT) addresses are refused, whatever encoding named them: ``0x7f000001``,
``2130706433``, ``0177.0.0.1`` and ``127.1`` are what the C resolver makes them
(127.0.0.1), ``::ffff:127.0.0.1`` and the IPv6 forms that carry an IPv4 address (NAT64,
6to4) are judged by the address they carry. A refused address is admitted only when a
rule names it exactly (``HARNESS_EGRESS_ALLOW``, or the admin's for that user:
agent/egress/rules.py): the host as written or the address itself, with the port
(``127.0.0.1:8080``); a ``*.domain`` rule never admits one.

The caller connects to the addresses returned here, never resolves the name again, so a
name that answers differently the second time (DNS rebinding) gains nothing. The git
relay (agent/runs/git_relay.py) and the egress proxy (agent/egress/proxy.py) use it.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Callable
from dataclasses import dataclass

DEFAULT_PORTS = (443, 80)
NAT64 = ipaddress.ip_network("64:ff9b::/96")
METADATA = {ipaddress.ip_address(a) for a in ("169.254.169.254", "fd00:ec2::254",
                                               "100.100.100.200", "192.0.0.192")}  # fmt: skip
_LABEL = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$")
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class EgressRefused(Exception):
    """A connection the rules do not admit; the message names the host and why."""


class BadRule(ValueError):
    pass


@dataclass(frozen=True)
class Rule:
    host: str  # lower case; "*.example.com" for a domain's names; an IPv6 address bare
    ports: tuple[int, ...]

    @property
    def wildcard(self) -> bool:
        return self.host.startswith("*.")

    def matches(self, host: str, port: int) -> bool:
        if port not in self.ports:
            return False
        if self.wildcard:
            return host.endswith(self.host[1:]) and len(host) > len(self.host) - 1
        return host == self.host


def split_host_port(text: str) -> tuple[str, int | None]:
    """``host``, ``host:port``, ``[v6]`` or ``[v6]:port`` → (host in lower case, port)."""
    text = text.strip().lower()
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        if rest and not rest.startswith(":"):
            raise BadRule(f"{text!r}: nothing may follow the bracketed address but a port")
        port_text = rest[1:] if rest else None
    elif text.count(":") == 1:
        host, port_text = text.split(":")
    else:
        host, port_text = text, None
    if port_text is None:
        return host, None
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise BadRule(f"{text!r}: the port must be a number from 1 to 65535")
    return host, int(port_text)


def valid_host(host: str) -> bool:
    """A DNS name (labels of letters, digits and hyphens) or an IP address."""
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        pass
    labels = host.removesuffix(".").split(".")
    return len(host) <= 253 and all(_LABEL.match(label) for label in labels)


def parse_rules(text: str) -> list[Rule]:
    """``HARNESS_EGRESS_ALLOW``: a comma list of ``host``, ``host:port`` or ``*.domain``
    (ports 443 and 80 when none is given)."""
    rules = []
    for item in (part.strip() for part in (text or "").split(",")):
        if not item:
            continue
        host, port = split_host_port(item)
        name = host.removeprefix("*.")
        if not name or not valid_host(name) or (host.startswith("*.") and _is_ip(name)):
            raise BadRule(f"{item!r} is not a host, host:port or *.domain")
        rules.append(Rule(host, (port,) if port else DEFAULT_PORTS))
    return rules


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def why_refused(address: IPAddress) -> str | None:
    """Why a sandbox may not reach ``address`` without a rule naming it; None: it may."""
    if isinstance(address, ipaddress.IPv6Address):
        carried = address.ipv4_mapped or address.sixtofour
        if carried is None and address in NAT64:
            carried = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if carried is not None:
            reason = why_refused(carried)
            return f"{reason} (as {address})" if reason else None
        if address.teredo:
            return "a Teredo tunnel address"
    if address in METADATA:
        return "a cloud metadata address"
    for test, reason in (("is_unspecified", "an unspecified address"),
                         ("is_loopback", "a loopback address"),
                         ("is_link_local", "a link-local address"),
                         ("is_multicast", "a multicast address"),
                         ("is_private", "a private address")):  # fmt: skip
        if getattr(address, test):
            return reason
    if not address.is_global:
        return "a reserved or shared address"
    return None


Resolver = Callable[..., list]


def resolve_checked(host: str, port: int, rules: list[Rule],
                    resolve: Resolver = socket.getaddrinfo) -> list[str]:  # fmt: skip
    """The addresses ``host`` resolves to, each checked: all of them when every one is
    admitted; else ``EgressRefused`` naming the host and why (one refused address is
    enough to refuse: which one a client would use is not ours to guess)."""
    host = host.lower().strip("[]")
    try:
        found = resolve(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise EgressRefused(f"{host}: the name does not resolve ({exc})") from None
    addresses: list[str] = []
    for *_, sockaddr in found:
        address = ipaddress.ip_address(str(sockaddr[0]).split("%")[0])
        reason = why_refused(address)
        if reason is not None and not _named(rules, host, address, port):
            raise EgressRefused(
                f"{host}:{port} is {reason} ({address}); a sandbox reaches it only when "
                f"HARNESS_EGRESS_ALLOW or an admin's Egress rule names it exactly "
                f"(e.g. {_example(host, port)})"
            )
        if str(address) not in addresses:
            addresses.append(str(address))
    if not addresses:
        raise EgressRefused(f"{host}: the name has no address")
    return addresses


def _named(rules: list[Rule], host: str, address: IPAddress, port: int) -> bool:
    exact = [rule for rule in rules if not rule.wildcard]
    return any(rule.matches(host, port) or rule.matches(str(address), port) for rule in exact)


def _example(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
