"""Request heads two HTTP parsers could read differently are refused before anything is
resolved or connected (request smuggling), and good ones parse to what the proxy uses."""

from __future__ import annotations

import pytest

from agent.egress import http_head
from agent.egress.http_head import BadRequest, parse

GOOD = b"GET http://example.com/a?b=1 HTTP/1.1\r\nHost: example.com\r\n"


def test_good_heads_parse():
    head = parse(GOOD + b"\r\n")
    assert (head.method, head.host, head.port, head.path) == ("GET", "example.com", 80, "/a?b=1")
    tunnel = parse(b"CONNECT pypi.org:443 HTTP/1.1\r\nHost: pypi.org:443\r\n\r\n")
    assert tunnel.connect and (tunnel.host, tunnel.port) == ("pypi.org", 443)
    v6 = parse(b"CONNECT [::1]:8080 HTTP/1.1\r\n\r\n")
    assert (v6.host, v6.port) == ("::1", 8080)
    assert parse(b"CONNECT example.com.:443 HTTP/1.1\r\n\r\n").host == "example.com"


@pytest.mark.parametrize(
    "head, why",
    [
        (GOOD + b"Content-Length: 5\r\nContent-Length: 6\r\n", "more than one Content-Length"),
        (GOOD + b"Content-Length: 5\r\nContent-length: 5\r\n", "more than one Content-Length"),
        (GOOD + b"Content-Length: +5\r\n", "not a number"),
        (GOOD + b"Content-Length: 5, 5\r\n", "not a number"),
        (GOOD + b"Content-Length: 0x5\r\n", "not a number"),
        (GOOD + b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n", "both"),
        (GOOD + b"Transfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n", "single"),
        (GOOD + b"Transfer-Encoding: gzip, chunked\r\n", "single chunked"),
        (GOOD + b"Transfer-Encoding: xchunked\r\n", "single chunked"),
        (GOOD + b"Transfer-Encoding : chunked\r\n", "malformed header"),
        (GOOD + b"X-A: 1\r\n Transfer-Encoding: chunked\r\n", "obs-fold"),
        (GOOD + b"X-A: 1\r\n\tmore\r\n", "obs-fold"),
        (GOOD + b"X-A: 1\nTransfer-Encoding: chunked\r\n", "bare CR or LF"),
        (GOOD + b"X-A: 1\rTransfer-Encoding: chunked\r\n", "bare CR or LF"),
        (GOOD + b"X-A: \xff\r\n", "not ASCII"),
        (GOOD + b"Host: other.example\r\n", "more than one Host"),
        (GOOD + b"X-A: " + b"a" * (http_head.MAX_HEAD) + b"\r\n", "too large"),
        (GOOD + b"".join(b"X-%d: 1\r\n" % i for i in range(101)), "too many"),
        (b"GET /relative HTTP/1.1\r\n", "absolute http://"),
        (b"GET https://example.com/ HTTP/1.1\r\n", "CONNECT"),
        (b"GET http://user:pw@example.com/ HTTP/1.1\r\n", "credentials"),
        (b"GET  http://example.com/ HTTP/1.1\r\n", "malformed request line"),
        (b"GET http://example.com/ HTTP/2.0\r\n", "malformed request line"),
        (b"CONNECT example.com HTTP/1.1\r\n", "host:port"),
        (b"CONNECT example.com:99999 HTTP/1.1\r\n", "port"),
        (b"CONNECT exa_mple.com:443 HTTP/1.1\r\n", "not a host"),
        (b"CONNECT a.com:443 HTTP/1.1\r\nContent-Length: 3\r\n", "with a body"),
    ],
)
def test_ambiguous_heads_are_refused(head, why):
    with pytest.raises(BadRequest, match=why):
        parse(head + b"\r\n")


def test_forwarded_head_is_origin_form_one_request_and_drops_hop_fields():
    head = parse(GOOD + b"Proxy-Authorization: Basic eA==\r\nConnection: keep-alive\r\n"
                 b"Authorization: mine\r\nAccept: */*\r\n\r\n")  # fmt: skip
    out = http_head.forwarded(head, None).decode()
    assert out.startswith("GET /a?b=1 HTTP/1.1\r\nHost: example.com\r\n")
    assert "Proxy-Authorization" not in out and "keep-alive" not in out
    assert "Authorization: mine" in out and out.endswith("Connection: close\r\n\r\n")
    injected = http_head.forwarded(head, "Basic c2VjcmV0").decode()
    assert "Authorization: Basic c2VjcmV0" in injected and "mine" not in injected
