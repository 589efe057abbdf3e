"""The admin's usage page: SVG bars per user-day drawn on the server, the same data as CSV,
staff only."""

from __future__ import annotations

import csv
import datetime
import io
import re
from decimal import Decimal

import pytest

from agent.models import UsageDay, User

pytestmark = pytest.mark.django_db

TODAY = datetime.datetime.now(datetime.UTC).date()


@pytest.fixture
def staff(client):
    client.force_login(User.objects.create_superuser("root", password="pw-root-123"))


@pytest.fixture
def spend():
    ada = User.objects.create_user("ada", password="pw-ada-123")
    evil = User.objects.create_user("=HYPERLINK(1)<b>", password="pw-evil-123")
    yesterday = TODAY - datetime.timedelta(days=1)
    rows = [
        (ada, yesterday, "2.000000", 1000, 500),
        (ada, TODAY, "1.000000", 300, 200),
        (evil, TODAY, "0.500000", 100, 0),
        (ada, TODAY - datetime.timedelta(days=45), "9.000000", 9, 9),  # outside 30 days
    ]
    for user, day, cost, tokens_in, tokens_out in rows:
        UsageDay.objects.create(user=user, date=day, cost_usd=Decimal(cost),
                                input_tokens=tokens_in, output_tokens=tokens_out)  # fmt: skip
    return ada, evil


def _bars(page: str, metric: str) -> dict[tuple[str, str], tuple[float, str]]:
    figure = re.search(rf'<figure class="usage-chart" data-metric="{metric}">(.*?)</figure>',
                       page, re.S).group(1)  # fmt: skip
    bar = (r'<rect x="[^"]+" y="[^"]+" width="[^"]+" height="([^"]+)" fill="[^"]+" '
           r'data-user="([^"]+)" data-date="([^"]+)"><title>([^<]*)</title>')  # fmt: skip
    bars = re.findall(bar, figure)
    return {(user, day): (float(height), title) for height, user, day, title in bars}


def test_the_cost_chart_has_a_bar_per_user_day_scaled_to_the_largest(client, staff, spend):
    page = client.get("/admin/agent/usageday/chart/").content.decode()
    bars = _bars(page, "cost_usd")
    yesterday = (TODAY - datetime.timedelta(days=1)).isoformat()
    evil = "=HYPERLINK(1)&lt;b&gt;"
    assert set(bars) == {("ada", yesterday), ("ada", TODAY.isoformat()), (evil, TODAY.isoformat())}
    assert bars[("ada", yesterday)][0] == 200.0  # the largest: full height
    assert bars[("ada", TODAY.isoformat())][0] == 100.0
    assert bars[(evil, TODAY.isoformat())][0] == 50.0
    assert bars[("ada", yesterday)][1] == f"ada {yesterday}: $2.0000"
    assert "<b>" not in page.split("usage-charts", 1)[1]  # the username is escaped


def test_the_token_chart_counts_input_and_output(client, staff, spend):
    bars = _bars(client.get("/admin/agent/usageday/chart/").content.decode(), "tokens")
    assert bars[("ada", TODAY.isoformat())] == (
        round(500 / 1500 * 200, 2),
        f"ada {TODAY.isoformat()}: 500 tokens",
    )


def test_the_csv_holds_the_same_rows_with_formulas_defused(client, staff, spend):
    response = client.get("/admin/agent/usageday/chart.csv")
    assert response["Content-Type"].startswith("text/csv")
    assert response["Content-Disposition"].startswith("attachment;")
    rows = list(csv.reader(io.StringIO(response.content.decode())))
    yesterday = (TODAY - datetime.timedelta(days=1)).isoformat()
    assert rows == [
        ["date", "username", "cost_usd", "input_tokens", "output_tokens"],
        [yesterday, "ada", "2.000000", "1000", "500"],
        [TODAY.isoformat(), "'=HYPERLINK(1)<b>", "0.500000", "100", "0"],
        [TODAY.isoformat(), "ada", "1.000000", "300", "200"],
    ]


@pytest.mark.parametrize("url", ["/admin/agent/usageday/chart/", "/admin/agent/usageday/chart.csv"])
def test_non_staff_get_the_admin_login(client, spend, url):
    client.force_login(spend[0])
    response = client.get(url)
    assert response.status_code == 302 and response["Location"].startswith("/admin/login/")
    client.logout()
    assert client.get(url)["Location"].startswith("/admin/login/")


def test_the_usage_list_links_to_the_charts(client, staff, spend):
    page = client.get("/admin/agent/usageday/").content.decode()
    assert 'href="/admin/agent/usageday/chart/"' in page


@pytest.mark.parametrize("url", ["/admin/agent/usageday/chart/", "/admin/agent/usageday/chart.csv"])
def test_staff_without_the_usage_view_permission_are_refused(client, spend, url):
    from django.contrib.auth.models import Permission

    clerk = User.objects.create_user("clerk", password="pw-clerk-123", is_staff=True)
    client.force_login(clerk)
    response = client.get(url)
    assert response.status_code == 403 and b"ada" not in response.content
    clerk.user_permissions.add(Permission.objects.get(codename="view_usageday"))
    client.force_login(User.objects.get(pk=clerk.pk))  # (permissions are cached per object)
    response = client.get(url)
    assert response.status_code == 200 and b"ada" in response.content


def test_the_day_labels_never_overlap():
    """The first-use review: the x labels overlapped (every 7th day and the last one)."""
    from agent.ui.usage_chart import Row, chart, days_back

    days = days_back(datetime.date(2026, 3, 31), 30)
    rows = [Row(days[0], "ada", Decimal("1"), 1, 1)]
    svg = str(chart(rows, days, "cost_usd", "Cost"))
    xs = [float(x) for x in re.findall(r'<text x="([\d.]+)"', svg)]
    assert len(xs) >= 4 and min(b - a for a, b in zip(xs, xs[1:], strict=False)) >= 60
    assert svg.count("31 Mar") == 1  # the last day is labelled


def test_the_last_day_label_ends_inside_the_chart():
    """The first-use review: the last label ran past the chart's edge and was cut ("27 I")."""
    from agent.ui.usage_chart import Row, chart, days_back

    days = days_back(datetime.date(2026, 11, 27), 30)
    svg = str(chart([Row(days[-1], "ada", Decimal("1"), 1, 1)], days, "cost_usd", "Cost"))
    width = float(re.search(r'<svg [^>]*width="([\d.]+)"', svg).group(1))
    labels = re.findall(r'<text x="([\d.]+)" y="[^"]+" text-anchor="(\w+)"[^>]*>([^<]+)<', svg)
    *earlier, (last_x, last_anchor, last_label) = labels
    assert last_label == "27 Nov" and last_anchor == "end" and float(last_x) <= width
    for x, anchor, label in earlier:  # each starts at its day, room to spare before the edge
        assert anchor == "start" and float(x) + 10 * len(label) <= width, label


def test_the_caption_names_the_largest_figure_or_says_plainly_there_is_none(client, staff):
    """The demanding-user pass: with every cost zero (the offline demo) the caption said
    "top: $1.0000", the scale's stand-in."""
    ada = User.objects.create_user("ada", password="pw-ada-123")
    UsageDay.objects.create(user=ada, date=TODAY, cost_usd=Decimal("0"), input_tokens=1200,
                            output_tokens=34)  # fmt: skip
    page = client.get("/admin/agent/usageday/chart/").content.decode()
    captions = re.findall(r"<figcaption>([^<]*)</figcaption>", page)
    assert captions == ["Cost (USD) per user per day (no spend in these days)",
                        "Tokens (in + out) per user per day (top: 1,234)"]  # fmt: skip
    UsageDay.objects.filter(user=ada).update(cost_usd=Decimal("0.25"))
    page = client.get("/admin/agent/usageday/chart/").content.decode()
    assert "Cost (USD) per user per day (top: $0.2500)" in page
