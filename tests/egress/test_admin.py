"""Staff edit egress rules in the admin (a bad host or port is refused, with why); the
Egress log is read-only there."""

from __future__ import annotations

import pytest

from agent.models import EgressLog, EgressRule, User

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff(client):
    client.force_login(User.objects.create_superuser("root", password="x"))
    return client


def test_staff_add_rules_and_bad_ones_are_refused(staff):
    url = "/admin/agent/egressrule/add/"
    assert staff.post(url, {"host": "pypi.org", "ports": "443"}).status_code == 302
    assert EgressRule.objects.get().host == "pypi.org"
    for host, ports in (("exa mple.org", "443"), ("pypi.org", "99999"), ("pypi.org:443", "80"),
                        ("pypi.org", "")):  # fmt: skip
        answer = staff.post(url, {"host": host, "ports": ports})
        assert answer.status_code == 200 and b"errornote" in answer.content, (host, ports)
    assert EgressRule.objects.count() == 1


def test_the_egress_log_is_read_only(staff):
    row = EgressLog.objects.create(host="pypi.org", port=443, allowed=False, reason="no rule")
    assert staff.get("/admin/agent/egresslog/").status_code == 200
    assert staff.get("/admin/agent/egresslog/add/").status_code == 403
    assert (
        staff.post(f"/admin/agent/egresslog/{row.pk}/delete/", {"post": "yes"}).status_code == 403
    )
    assert EgressLog.objects.count() == 1
