"""The workbench around the transcript, as a person sees it: the offline notice, the
welcome, the sidebar's controls and the model switch."""

from __future__ import annotations

import pytest

from testkit.live import LiveServer
from tests.e2e.conftest import contexts_on, sign_in


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """A server with no API key: the offline demo model answers."""
    server = LiveServer(tmp_path_factory.mktemp("demo-workbench"), HARNESS_BASH="off")
    server.start()
    server.create_users("dana", "eli")
    yield server
    server.stop()


@pytest.fixture
def demo_context(browser, demo):
    yield from contexts_on(browser, demo)


def test_the_offline_notice_can_be_dismissed_and_stays_dismissed(demo_context):
    page = sign_in(demo_context(), "eli")
    banner = page.locator("#offline-banner")
    assert banner.is_visible() and banner.inner_text().count("scripted") == 1
    page.click("#offline-dismiss")
    assert banner.is_hidden()
    page.reload()
    page.wait_for_selector("body[data-ws=open]")
    assert page.locator("#offline-banner").is_hidden()
