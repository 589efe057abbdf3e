"""The sandbox's self-test behind /healthz: its result cached, an error asked again later."""

from __future__ import annotations

import pytest

from agent.runs import selftest


@pytest.fixture
def outcomes(monkeypatch, settings):
    """The self-test answers from a list (the real one forks a sandbox)."""
    settings.HARNESS_BASH = "sandbox"
    answers: list[str] = []
    calls: list[int] = []

    def run(mode, bwrap):
        calls.append(1)
        return answers.pop(0)

    monkeypatch.setattr(selftest, "_run", run)
    monkeypatch.setattr(selftest, "_results", {})
    return answers, calls


def test_a_success_is_remembered_and_no_probe_forks_again(outcomes):
    answers, calls = outcomes
    answers.append("ok")
    assert [selftest.sandbox_status() for _ in range(5)] == ["ok"] * 5
    assert len(calls) == 1


def test_an_error_is_asked_again_after_a_while_not_on_every_probe(outcomes, monkeypatch):
    answers, calls = outcomes
    answers.extend(["error: the sandboxed command did not finish within 30 s", "ok"])
    assert selftest.sandbox_status().startswith("error")
    assert selftest.sandbox_status().startswith("error")  # within the interval: cached
    assert len(calls) == 1
    monkeypatch.setattr(selftest, "RETRY_SECONDS", 0.0)
    assert selftest.sandbox_status() == "ok"  # a busy host's failure does not stay
    assert len(calls) == 2
