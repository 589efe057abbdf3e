"""Static files: content-hashed URLs cached for good, gzip when accepted, revalidation for
plain URLs, nothing outside the static roots; pages gzipped, event streams not."""

from __future__ import annotations

import gzip
import re

import pytest
from django.core.management import call_command
from django.templatetags.static import static
from django.test import Client

from agent.server.staticfiles import minified
from tests.conftest import REPO

HASHED = r"/static/{}\.[0-9a-f]{{12}}\.{}"
YEAR = 365 * 24 * 3600


@pytest.fixture
def collected(settings, tmp_path):
    """``collectstatic`` into a directory of the test's, as a deployment runs it."""
    settings.STATIC_ROOT = tmp_path / "static"
    call_command("collectstatic", "--noinput", verbosity=0)
    return settings


def fetch(path: str, method: str = "GET", **headers: str) -> tuple[int, dict, bytes]:
    response = getattr(Client(), method.lower())(path, headers=headers)
    content = b"".join(response.streaming_content) if response.streaming else response.content
    return response.status_code, {k.lower(): v for k, v in response.items()}, content


def _max_age(headers: dict) -> int:
    return int(re.search(r"max-age=(\d+)", headers["cache-control"])[1])


def served_copy(name: str) -> bytes:
    """What collectstatic makes of ``static/<name>``: our scripts and stylesheets minified."""
    source = (REPO / "static" / name).read_text()
    return minified(name, source).encode()


def test_static_urls_carry_the_content_hash(collected):
    assert re.fullmatch(HASHED.format("harness", "js"), static("harness.js"))


def test_versioned_asset_is_gzipped_and_cached_for_good(collected):
    status, headers, body = fetch(static("harness.js"), accept_encoding="gzip, br")
    assert status == 200
    assert "immutable" in headers["cache-control"] and _max_age(headers) >= YEAR
    assert headers["content-encoding"] == "gzip" and headers["vary"] == "Accept-Encoding"
    assert gzip.decompress(body) == served_copy("harness.js")
    assert int(headers["content-length"]) == len(body)
    assert headers["x-content-type-options"] == "nosniff"


def test_production_serves_the_files_indexed_at_start(collected):
    """DEBUG off, as deployed: WhiteNoise indexes the collected files once, no finders."""
    collected.WHITENOISE_AUTOREFRESH = collected.WHITENOISE_USE_FINDERS = False
    status, headers, body = fetch(static("harness.js"), accept_encoding="gzip")
    assert status == 200 and headers["content-encoding"] == "gzip"
    assert gzip.decompress(body) == served_copy("harness.js")
    assert fetch("/static/nope.js")[0] == 404


def test_under_debug_the_plain_names_are_served_as_they_are_now(collected, tmp_path):
    """Development: an edited file is served at once, no collectstatic needed."""
    collected.DEBUG = True
    fresh = tmp_path / "dev"
    fresh.mkdir()
    (fresh / "harness.js").write_text("// edited just now\n")
    collected.STATICFILES_DIRS = [fresh, *collected.STATICFILES_DIRS]
    assert static("harness.js") == "/static/harness.js"
    status, _, body = fetch("/static/harness.js")
    assert status == 200 and body == b"// edited just now\n"


def test_asset_without_gzip_support_is_sent_plain(collected):
    status, headers, body = fetch(static("harness.css"))
    assert status == 200 and "content-encoding" not in headers
    assert body == served_copy("harness.css")
    assert headers["content-type"].replace('"', "") == "text/css; charset=utf-8"  # (quoted or not)


@pytest.mark.parametrize("name", ["harness.js", "harness.css", "terminal.js", "pygments.css"])
def test_our_scripts_and_stylesheets_are_served_minified(collected, name):
    """A third or more off each (docs/PERFORMANCE.md), the repository's copy untouched."""
    source = (REPO / "static" / name).read_bytes()
    body = fetch(static(name))[2]
    assert body == served_copy(name) and len(body) < 0.8 * len(source)
    assert b"\n  " not in body  # indentation gone
    assert (REPO / "static" / name).read_bytes() == source


def test_vendored_and_app_assets_are_left_as_shipped(collected):
    xterm = "vendor/xterm-6.0.0.min.js"
    assert fetch(static(xterm))[2] == (REPO / "static" / xterm).read_bytes()
    admin = fetch(static("admin/css/base.css"))[2]
    assert b"\n" in admin  # Django's own stylesheet, as Django ships it


def test_unversioned_url_revalidates_instead_of_caching(collected):
    for path in ("/static/harness.js", "/static/harness.js?v=0000000000000000"):
        status, headers, _ = fetch(path)
        assert status == 200 and _max_age(headers) == 0
        status, _, body = fetch(path, if_none_match=headers["etag"])
        assert status == 304 and body == b""


@pytest.mark.parametrize("path", [
    "/static/../manage.py", "/static/..%2Fmanage.py", "/static//etc/passwd",
    "/static/vendor/../../harness_site/settings.py", "/static/nope.js", "/static/",
])  # fmt: skip
def test_paths_outside_the_static_roots_are_not_found(collected, path):
    status, _, body = fetch(path)
    assert status == 404 and b"SECRET" not in body


def test_head_has_no_body_and_post_is_refused(collected):
    status, headers, body = fetch(static("harness.js"), method="HEAD")
    assert status == 200 and body == b"" and int(headers["content-length"]) > 0
    status, headers, _ = fetch(static("harness.js"), method="POST")
    assert status == 405 and headers["allow"] == "GET, HEAD"


def test_admin_assets_are_served_too(collected):
    url = static("admin/css/base.css")
    assert re.fullmatch(HASHED.format("admin/css/base", "css"), url)
    assert fetch(url)[0] == 200


def test_without_collectstatic_the_plain_urls_come_from_the_finders():
    """Development before any ``collectstatic``: what Django documents for it."""
    assert static("harness.js") == "/static/harness.js"
    status, _, body = fetch("/static/harness.js")
    assert status == 200 and body == (REPO / "static" / "harness.js").read_bytes()


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
