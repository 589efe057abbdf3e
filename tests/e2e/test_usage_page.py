"""The admin's usage page in a browser (issue 15): a staff member sees the server-drawn SVG
charts (a bar per user and day, each saying what it is) and downloads the same figures as
CSV; nothing on the page comes from a chart library at run time."""

from __future__ import annotations

import csv
import io

SETUP = """
import datetime
from decimal import Decimal
from agent.models import UsageDay, User
if not User.objects.filter(username="auditor").exists():
    User.objects.create_superuser("auditor", password="pw-auditor-1234")
today = datetime.datetime.now(datetime.UTC).date()
for name, back, cost, tokens_in, tokens_out in (("alice", 0, "1.50", 1000, 200),
                                                ("alice", 2, "0.75", 500, 100),
                                                ("bob", 1, "3.00", 2000, 400)):
    UsageDay.objects.update_or_create(
        user=User.objects.get(username=name), date=today - datetime.timedelta(days=back),
        defaults={"cost_usd": Decimal(cost), "input_tokens": tokens_in,
                  "output_tokens": tokens_out})
"""


def test_a_staff_member_reads_the_usage_charts_and_downloads_the_csv(new_context, live):
    live.manage("shell", "-c", SETUP)
    context = new_context()
    page = context.new_page()
    scripts = []
    page.on("request", lambda r: scripts.append(r.url) if r.resource_type == "script" else None)
    page.goto("/admin/login/?next=/admin/agent/usageday/chart/")
    page.fill("#id_username", "auditor")
    page.fill("#id_password", "pw-auditor-1234")
    page.click("input[type=submit]")
    page.wait_for_selector("#usage-charts figure.usage-chart svg")
    for metric in ("cost_usd", "tokens"):
        bars = page.locator(f"figure.usage-chart[data-metric={metric}] rect[data-user]")
        days = {(b.get_attribute("data-user"), b.get_attribute("data-date"))
                for b in bars.all()}  # fmt: skip
        assert {user for user, _ in days} >= {"alice", "bob"} and len(days) >= 3
        assert all(box["height"] > 0 for box in (b.bounding_box() for b in bars.all()))
    tallest = page.locator("figure.usage-chart[data-metric=cost_usd] rect[data-user=bob] title")
    assert "bob" in tallest.first.text_content() and "3.00" in tallest.first.text_content()
    assert not [url for url in scripts if "chart" in url.lower()]  # no chart library
    # The legend is its swatches: no list bullet before each (the demanding-user pass).
    legend = page.locator("figure.usage-chart .usage-legend li").first
    assert legend.evaluate("li => getComputedStyle(li).listStyleType") == "none"
    assert legend.evaluate("li => getComputedStyle(li, '::marker').content") in ("none", "normal")
    with page.expect_download() as download:
        page.click("#usage-csv")
    assert download.value.suggested_filename.endswith(".csv")
    with open(download.value.path(), encoding="utf-8") as saved:
        rows = list(csv.DictReader(io.StringIO(saved.read())))
    costs = {(row["username"], row["date"]): row["cost_usd"] for row in rows}
    assert any(user == "bob" and cost.startswith("3.00") for (user, _), cost in costs.items())
    assert sum(1 for user, _ in costs if user == "alice") >= 2


def test_the_admin_transcript_has_no_dead_controls_and_the_admin_its_icon(new_context, live):
    """The first-use review: the admin transcript showed 22 buttons that do nothing (the
    chat page's script is not there), and admin pages asked for /favicon.ico (404)."""
    live.manage("shell", "-c", SETUP + (
        "from agent.models import Conversation, Event\n"
        "c = Conversation.objects.create(owner=User.objects.get(username='alice'), model='m',"
        " title='for the admin', last_seq=2)\n"
        "Event.objects.create(conversation=c, seq=1, type='user',"
        " payload={'type': 'user', 'seq': 1, 'timestamp': 1, 'content': 'hello'})\n"
        "Event.objects.create(conversation=c, seq=2, type='text',"
        " payload={'type': 'text', 'seq': 2, 'timestamp': 2, 'content': 'hi\\n\\n```\\nx\\n```'})\n"
        "print(c.id)\n"
    ))  # fmt: skip
    context = new_context()
    page = context.new_page()
    missing = []
    page.on("response", lambda r: missing.append(r.url) if r.status == 404 else None)
    page.goto("/admin/login/?next=/admin/agent/conversation/")
    page.fill("#id_username", "auditor")
    page.fill("#id_password", "pw-auditor-1234")
    page.click("input[type=submit]")
    page.click("text=for the admin")
    page.wait_for_selector(".transcript [data-part=text]")
    assert page.locator(".transcript button:visible").count() == 0
    assert "hello" in page.inner_text(".transcript")
    page.wait_for_load_state("networkidle")
    assert missing == [], missing
