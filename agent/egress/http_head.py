"""Strict parsing of what a sandbox sends the egress proxy: one request head, refused on
anything two HTTP parsers could read differently (request smuggling): a bare CR or LF,
obs-fold, a space before a colon, non-ASCII, more than one or a non-numeric
Content-Length, any Transfer-Encoding but a lone ``chunked``, both framings at once, an
oversized head, a target that is not ``host:port`` (CONNECT) or an ``http://`` URI."""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from agent.core.egress_rules import BadRule, split_host_port, valid_host

MAX_HEAD = 16 * 1024
MAX_FIELDS = 100
_REQUEST_LINE = re.compile(rb"^([A-Z]{1,20}) ([\x21-\x7e]{1,8000}) HTTP/1\.[01]$")
_FIELD = re.compile(rb"^([!#$%&'*+.^_`|~0-9A-Za-z-]+):[ \t]*([\x20-\x7e\t]*?)[ \t]*$")
# Hop-by-hop fields the proxy drops before a plain-http request goes on.
HOP = {"connection", "proxy-connection", "keep-alive", "proxy-authorization", "te",
       "trailer", "upgrade"}  # fmt: skip


class BadRequest(ValueError):
    """A head the proxy refuses to read (400); the message says why."""


@dataclass
class Head:
    method: str
    host: str
    port: int
    path: str  # origin-form for plain http; "" for CONNECT
    fields: list[tuple[str, str]]

    @property
    def connect(self) -> bool:
        return self.method == "CONNECT"

    def field(self, name: str) -> str | None:
        found = [value for key, value in self.fields if key.lower() == name]
        return found[0] if found else None


def parse(data: bytes) -> Head:
    """``data`` ends with the blank line (CRLF CRLF)."""
    if len(data) > MAX_HEAD:
        raise BadRequest("the request head is too large")
    lines = data[:-4].split(b"\r\n")
    if any(b"\r" in line or b"\n" in line for line in lines):
        raise BadRequest("a bare CR or LF in the request head")
    if any(byte > 0x7E for byte in data):
        raise BadRequest("a byte that is not ASCII in the request head")
    match = _REQUEST_LINE.match(lines[0])
    if not match:
        raise BadRequest("a malformed request line")
    if len(lines) - 1 > MAX_FIELDS:
        raise BadRequest("too many header fields")
    fields = [_field(line) for line in lines[1:]]
    method, target = match.group(1).decode(), match.group(2).decode()
    _check_framing(method, fields)
    if method == "CONNECT":
        host, port = _authority(target, None)
        return Head(method, host, port, "", fields)
    parts = urlsplit(target)
    if parts.scheme != "http" or not parts.netloc:
        raise BadRequest("give an absolute http:// URI (https goes through CONNECT)")
    host, port = _authority(parts.netloc, 80)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return Head(method, host, port, path, fields)


def _field(line: bytes) -> tuple[str, str]:
    if line[:1] in (b" ", b"\t"):
        raise BadRequest("a folded header line (obs-fold)")
    match = _FIELD.match(line)
    if not match:
        raise BadRequest("a malformed header field")
    return match.group(1).decode(), match.group(2).decode()


def _check_framing(method: str, fields: list[tuple[str, str]]) -> None:
    lengths = [value for key, value in fields if key.lower() == "content-length"]
    codings = [value for key, value in fields if key.lower() == "transfer-encoding"]
    hosts = [value for key, value in fields if key.lower() == "host"]
    if len(lengths) > 1:
        raise BadRequest("more than one Content-Length")
    if lengths and not re.fullmatch(r"[0-9]{1,15}", lengths[0]):
        raise BadRequest("a Content-Length that is not a number")
    if len(codings) > 1 or (codings and codings[0].lower() != "chunked"):
        raise BadRequest("a Transfer-Encoding other than a single chunked")
    if lengths and codings:
        raise BadRequest("both Content-Length and Transfer-Encoding")
    if len(hosts) > 1:
        raise BadRequest("more than one Host")
    if method == "CONNECT" and (codings or (lengths and int(lengths[0]))):
        raise BadRequest("a CONNECT request with a body")


def _authority(text: str, default: int | None) -> tuple[str, int]:
    if "@" in text:
        raise BadRequest("credentials in the request target")
    try:
        host, port = split_host_port(text)
    except BadRule as exc:
        raise BadRequest(str(exc)) from None
    host = host.removesuffix(".")
    if port is None:
        if default is None:
            raise BadRequest("CONNECT needs host:port")
        port = default
    if not host or not valid_host(host):
        raise BadRequest(f"{host!r} is not a host name or address")
    return host, port


def forwarded(head: Head, authorization: str | None) -> bytes:
    """The head of a plain-http request as it goes on: origin-form, hop-by-hop fields
    dropped, one connection per request (``Connection: close``), the credential added
    when the proxy holds one for this host."""
    host = f"[{head.host}]" if ":" in head.host else head.host
    authority = host if head.port == 80 else f"{host}:{head.port}"
    lines = [f"{head.method} {head.path} HTTP/1.1", f"Host: {authority}"]
    for key, value in head.fields:
        replaced = key.lower() == "host" or (authorization and key.lower() == "authorization")
        if key.lower() not in HOP and not replaced:
            lines.append(f"{key}: {value}")
    if authorization:
        lines.append(f"Authorization: {authorization}")
    lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("ascii")
