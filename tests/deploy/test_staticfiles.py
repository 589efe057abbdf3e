"""Static files: content-hashed URLs cached for a year, gzip when accepted, revalidation
for stale URLs, nothing outside the static roots; pages gzipped, event streams not."""

from __future__ import annotations

import gzip
import re

import pytest
from django.templatetags.static import static

from agent.server.staticfiles import StaticFilesApp
from tests.conftest import REPO


async def _not_static(scope, receive, send):
    raise AssertionError("only static paths come here")


async def fetch(path: str, method: str = "GET", **headers: str) -> tuple[int, dict, bytes]:
    url, _, query = path.partition("?")
    scope = {
        "type": "http",
        "method": method,
        "path": url,
        "query_string": query.encode(),
        "headers": [(k.replace("_", "-").lower().encode(), v.encode()) for k, v in headers.items()],
    }
    sent: list[dict] = []

    async def send(message):
        sent.append(message)

    await StaticFilesApp(_not_static)(scope, None, send)
    start, body = sent[0], sent[1]["body"]
    return start["status"], {k.decode(): v.decode() for k, v in start["headers"]}, body


def test_static_urls_carry_the_content_hash():
    url = static("harness.js")
    assert re.fullmatch(r"/static/harness\.js\?v=[0-9a-f]{16}", url)


async def test_versioned_asset_is_gzipped_and_cached_for_a_year():
    status, headers, body = await fetch(static("harness.js"), accept_encoding="gzip, br")
    assert status == 200
    assert headers["cache-control"] == "public, max-age=31536000, immutable"
    assert headers["content-encoding"] == "gzip" and headers["vary"] == "Accept-Encoding"
    assert gzip.decompress(body) == (REPO / "static" / "harness.js").read_bytes()
    assert int(headers["content-length"]) == len(body)


async def test_asset_without_gzip_support_is_sent_plain():
    status, headers, body = await fetch(static("harness.css"))
    assert status == 200 and "content-encoding" not in headers
    assert body == (REPO / "static" / "harness.css").read_bytes()
    assert headers["content-type"] == "text/css; charset=utf-8"


async def test_stale_or_unversioned_url_revalidates_instead_of_caching():
    for path in ("/static/harness.js", "/static/harness.js?v=0000000000000000"):
        status, headers, _ = await fetch(path)
        assert status == 200 and headers["cache-control"] == "no-cache"
        etag = headers["etag"]
        status, _, body = await fetch(path, if_none_match=etag)
        assert status == 304 and body == b""


@pytest.mark.parametrize("path", [
    "/static/../manage.py", "/static/..%2Fmanage.py", "/static//etc/passwd",
    "/static/vendor/../../harness_site/settings.py", "/static/nope.js", "/static/",
])  # fmt: skip
async def test_paths_outside_the_static_roots_are_not_found(path):
    status, _, body = await fetch(path)
    assert status == 404 and b"SECRET" not in body


async def test_head_has_no_body_and_post_is_refused():
    status, headers, body = await fetch(static("harness.js"), method="HEAD")
    assert status == 200 and body == b"" and int(headers["content-length"]) > 0
    status, headers, _ = await fetch(static("harness.js"), method="POST")
    assert status == 405 and headers["allow"] == "GET, HEAD"


def test_admin_assets_are_served_too():
    assert "?v=" in static("admin/css/base.css")


@pytest.mark.django_db
def test_pages_are_gzipped(client, django_user_model):
    from agent.models import Conversation

    user = django_user_model.objects.create_user("gus", password="pw-gus-12345")
    client.force_login(user)
    conversation = Conversation.objects.create(owner=user, model="claude-haiku-4-5")
    page = client.get(f"/c/{conversation.id}/", HTTP_ACCEPT_ENCODING="gzip")
    assert page["Content-Encoding"] == "gzip"
    assert b"<!doctype html>" in gzip.decompress(page.content)


def test_event_streams_are_never_compressed(rf):
    from django.http import StreamingHttpResponse

    from agent.server.middleware import CompressionMiddleware

    def view(request):
        return StreamingHttpResponse(iter([b"id: 1\ndata: {}\n\n"] * 50),
                                     content_type="text/event-stream")  # fmt: skip

    response = CompressionMiddleware(view)(rf.get("/api/x", HTTP_ACCEPT_ENCODING="gzip"))
    assert not response.has_header("Content-Encoding")
    assert b"".join(response.streaming_content).startswith(b"id: 1\ndata: {}")


def test_production_serves_from_memory_without_looking_files_up(settings, monkeypatch):
    from agent.server import staticfiles

    settings.DEBUG = False
    first = staticfiles.load("harness.js")
    monkeypatch.setattr(staticfiles.finders, "find", lambda path: 1 / 0)
    assert staticfiles.load("harness.js") is first
