"""The per-minute prompt counter (agent/runs/rate.py): a sliding minute from two windows,
and an increment that concurrent prompts cannot lose."""

from __future__ import annotations

import threading

import pytest
from django.db import connection, transaction

from agent.models import User
from agent.runs import rate

pytestmark = pytest.mark.django_db(transaction=True)

T = 1_800_000_000.0  # a window's start (a multiple of 60 s)


def sent(user, now: float) -> int:
    user.refresh_from_db()
    return rate.sent_last_minute(user, now)


def test_prompts_of_this_minute_count_fully_and_the_last_minutes_fade_out():
    user = User.objects.create_user("pat", password="pw-pat-12345")
    for _ in range(4):
        rate.count_prompt(user.pk, T + 50)  # late in one window
    assert sent(user, T + 59) == 4
    assert sent(user, T + 60) == 4  # the next window's start: all four still inside
    assert sent(user, T + 90) == 2  # halfway through it: half of them (rounded up)
    assert sent(user, T + 119) == 1
    assert sent(user, T + 120) == 0  # two windows on: none
    rate.count_prompt(user.pk, T + 75)
    assert sent(user, T + 75) == 1 + 3  # this window's one and ¾ of the last one's four
    rate.count_prompt(user.pk, T + 200)  # windows skipped: nothing carried over
    assert sent(user, T + 200) == 1


def test_concurrent_prompts_are_all_counted():
    user = User.objects.create_user("rush", password="pw-rush-1234")
    errors = []

    def send():
        try:
            for _ in range(20):
                rate.count_prompt(user.pk, T + 10)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=send) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sent(user, T + 10) == 120


def test_the_count_does_not_depend_on_the_history(django_assert_max_num_queries):
    user = User.objects.create_user("long", password="pw-long-1234")
    with transaction.atomic(), django_assert_max_num_queries(2):  # (the claim's transaction)
        rate.count_prompt(user.pk)
    with django_assert_max_num_queries(0):
        rate.sent_last_minute(user)


@pytest.mark.parametrize("earlier", [0, 1, 3, 4, 7])
@pytest.mark.parametrize("into", [0.0, 0.001, 15.0, 29.9999, 30.0, 45.5, 59.999])
def test_the_limit_admits_exactly_while_the_sliding_count_is_below_it(earlier, into):
    """The UPDATE's check (whole milliseconds, in SQL) and the count read in Python agree
    at every point of the window, the earlier window's share rounded up in both."""
    user = User.objects.create_user(f"edge{earlier}", password="pw-edge-12345")
    for _ in range(earlier):
        rate.count_prompt(user.pk, T - 5)  # the window before
    now = T + into
    for _ in range(6):
        below = sent(user, now) < 4
        assert rate.count_prompt(user.pk, now, limit=4) is below
    assert sent(user, now) == max(4, -(-earlier * (60_000 - int(into * 1000)) // 60_000))
