"""404 and 500 pages in the app's own style, with DEBUG off (as deployed)."""

from __future__ import annotations

import uuid

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db


@pytest.fixture
def production(settings):
    settings.DEBUG = False
    settings.ALLOWED_HOSTS = ["testserver"]
    return settings


def styled(page: str) -> bool:
    return (
        "/static/harness.css" in page
        and 'class="site-error"' in page
        and "<h1>Harness</h1>" in page
    )


def test_an_unknown_conversation_gets_the_styled_404(production, django_user_model):
    user = django_user_model.objects.create_user("erin", password="pw-erin-1234")
    client = Client()
    client.force_login(user)
    response = client.get(f"/c/{uuid.uuid4()}/")
    assert response.status_code == 404
    page = response.content.decode()
    assert styled(page) and 'data-status="404"' in page and "Not found" in page
    assert "<title>Not found · Harness</title>" in page


def test_an_unknown_url_gets_the_styled_404(production):
    response = Client().get("/no/such/page/")
    assert response.status_code == 404
    assert styled(response.content.decode())


@pytest.mark.urls("tests.web.error_urls")
def test_a_failing_view_gets_the_styled_500(production):
    response = Client(raise_request_exception=False).get("/boom/")
    assert response.status_code == 500
    page = response.content.decode()
    assert styled(page) and 'data-status="500"' in page and "Something went wrong" in page
    assert "forced failure" not in page and "Traceback" not in page
