"""The address check the git relay (and later the egress proxy) applies after resolving."""

from __future__ import annotations

import socket

import pytest

from agent.core.egress_rules import (
    BadRule,
    EgressRefused,
    parse_rules,
    resolve_checked,
    split_host_port,
)

LOOPBACK_SPELLINGS = ["127.0.0.1", "0x7f000001", "2130706433", "0177.0.0.1", "127.1",
                      "::ffff:127.0.0.1", "::1", "[::1]", "0.0.0.0", "localhost"]  # fmt: skip


@pytest.mark.parametrize("host", LOOPBACK_SPELLINGS)
def test_every_spelling_of_loopback_is_refused_without_a_rule(host):
    with pytest.raises(EgressRefused) as refused:
        resolve_checked(host, 8080, [])
    assert "HARNESS_EGRESS_ALLOW" in str(refused.value)


@pytest.mark.parametrize("address", ["10.1.2.3", "172.16.0.1", "192.168.1.1", "169.254.169.254",
                                     "100.100.100.200", "224.0.0.1", "fd00:ec2::254",
                                     "fe80::1", "64:ff9b::7f00:1", "2002:7f00:1::1",
                                     "::ffff:10.0.0.1", "100.64.0.1", "240.0.0.1"])  # fmt: skip
def test_private_link_local_multicast_metadata_and_tunnels_are_refused(address):
    with pytest.raises(EgressRefused):
        resolve_checked(address, 443, [])


def _resolving_to(address: str):
    def resolve(host, port, type=0):
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        return [(family, socket.SOCK_STREAM, 6, "", (address, port))]

    return resolve


def test_a_name_that_resolves_to_loopback_is_refused_by_its_address():
    with pytest.raises(EgressRefused) as refused:
        resolve_checked("git.evil.example", 443, [], resolve=_resolving_to("127.0.0.1"))
    assert "git.evil.example:443 is a loopback address (127.0.0.1)" in str(refused.value)


def test_public_addresses_pass_and_come_back_to_be_connected_to():
    found = resolve_checked("git.example.com", 443, [], resolve=_resolving_to("93.184.216.34"))
    assert found == ["93.184.216.34"]


def test_a_rule_naming_the_exact_host_and_port_admits_a_loopback_address():
    rules = parse_rules("127.0.0.1:8080, git.internal:8443, *.corp.example")
    assert resolve_checked("127.0.0.1", 8080, rules) == ["127.0.0.1"]
    # The same address in another spelling is that address: the rule names it.
    assert resolve_checked("127.1", 8080, rules) == ["127.0.0.1"]
    with pytest.raises(EgressRefused):
        resolve_checked("127.0.0.1", 8081, rules)  # another port
    assert resolve_checked("git.internal", 8443, rules,
                           resolve=_resolving_to("10.0.0.5")) == ["10.0.0.5"]  # fmt: skip
    with pytest.raises(EgressRefused):  # a wildcard never admits a private address
        resolve_checked("git.corp.example", 443, rules, resolve=_resolving_to("10.0.0.6"))


def test_a_name_with_one_private_address_among_public_ones_is_refused():
    def resolve(host, port, type=0):
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.216.34", port)),
                (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.0.0.1", port))]  # fmt: skip

    with pytest.raises(EgressRefused):
        resolve_checked("mixed.example", 443, [], resolve=resolve)


def test_rules_parse_strictly():
    assert [(r.host, r.ports) for r in parse_rules("a.example, b.example:8080, [::1]:9")] == [
        ("a.example", (443, 80)), ("b.example", (8080,)), ("::1", (9,))]  # fmt: skip
    for bad in ("a.example:0", "a.example:http", "bad_host!", "*.10.0.0.1", "[::1]x"):
        with pytest.raises(BadRule):
            parse_rules(bad)
    assert split_host_port("Git.Example.COM:8443") == ("git.example.com", 8443)


def test_a_name_that_does_not_resolve_is_refused_with_the_reason():
    with pytest.raises(EgressRefused) as refused:
        resolve_checked("no-such-host.invalid", 443, [])
    assert "does not resolve" in str(refused.value)
