"""Queries compiled once and run with new values (agent/server/prepared.py): the same rows as
their querysets for every caller, on SQLite here and on PostgreSQL in a live database."""

from __future__ import annotations

import datetime
import gc
import threading
import uuid
import weakref
from unittest import mock

import pytest
from django.contrib.sessions.backends.db import SessionStore
from django.db import connection
from django.db.models.sql.compiler import SQLCompiler
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from agent.access import readable_by
from agent.models import Conversation, Event, Membership, User
from agent.runs import rate
from agent.runs.claim import _DRIVABLE, _drivable
from agent.server.prepared import Prepared, PreparedUpdate, insert_rows, update_row
from agent.web.revocation import _WITH_SESSION, _WITHOUT_SESSION, _socket_rows

pytestmark = pytest.mark.django_db(transaction=True)


def _people_and_conversations():
    """Every kind of reader: owner, collaborator, viewer, stranger, an inactive user; a
    private, a shared, a team and a running conversation, and one of an inactive owner."""
    names = ("owner", "collab", "viewer", "stranger", "gone")
    users = {name: User.objects.create_user(name, password=f"pw-{name}-12345") for name in names}
    User.objects.filter(username="gone").update(is_active=False)
    owner = users["owner"]
    private = Conversation.objects.create(owner=owner, model="m")
    shared = Conversation.objects.create(owner=owner, model="m", title="shared")
    Membership.objects.create(conversation=shared, user=users["collab"], role="collaborator")
    Membership.objects.create(conversation=shared, user=users["viewer"], role="viewer")
    team = Conversation.objects.create(owner=owner, model="m", team=True)
    running = Conversation.objects.create(owner=owner, model="m", state="running")
    orphan = Conversation.objects.create(owner=users["gone"], model="m")
    return list(users.values()), [private, shared, team, running, orphan]


def check_against_querysets() -> int:
    """Each prepared query of the run start against its queryset, for every user and
    conversation (and a conversation that does not exist); returns the cases compared.
    Also run by the PostgreSQL test below, in a live database."""
    users, conversations = _people_and_conversations()
    session = SessionStore()
    session.create()
    now = timezone.now()
    cases = 0
    for user in users:
        for cid in [c.id for c in conversations] + [uuid.uuid4()]:
            expected = list(_socket_rows(user.pk, cid, session.session_key, now))
            assert _WITH_SESSION.values(user.pk, cid, session.session_key, now) == expected
            assert _WITHOUT_SESSION.values(user.pk, cid) == list(_socket_rows(user.pk, cid))
            gone = _WITH_SESSION.values(user.pk, cid, "no-such-session", now)
            assert [row[2] for row in gone] == [False] * len(gone)

            def seen(rows):
                return [(c.id, c.title, c.role, c.shared, c.owner.username,
                         c.history, c.lease_until) for c in rows]  # fmt: skip

            assert seen(_DRIVABLE.objects(user.pk, cid)) == seen(_drivable(user.pk, cid))
            cases += 1
    # A row read with its owner: no second query for it.
    owner, shared = users[0], conversations[1]
    (found,) = _DRIVABLE.objects(owner.pk, shared.id)
    with CaptureQueriesContext(connection) as queries:
        assert found.owner.username == "owner" and found.role == "owner"
    assert len(queries) == 0
    assert found.shared
    return cases


def check_writes() -> str:
    """``insert_rows`` and ``update_row`` store what ``bulk_create`` and ``update`` would:
    JSON, the time of ``auto_now_add``, a foreign key by its id."""
    owner = User.objects.create_user("writer", password="pw-writer-12345")
    conversation = Conversation.objects.create(owner=owner, model="m")
    payload = {"type": "user", "seq": 1, "content": 'héllo \u2028 "quoted"', "n": [1, 2.5]}
    before = timezone.now()
    insert_rows(Event, [{"conversation": conversation.id, "seq": 1, "type": "user",
                         "payload": payload, "branch": 0},
                        {"conversation": conversation.id, "seq": 2, "type": "status",
                         "payload": {"state": "thinking"}, "branch": 3}])  # fmt: skip
    rows = list(Event.objects.filter(conversation=conversation).order_by("seq"))
    assert [(r.seq, r.type, r.payload, r.branch) for r in rows] == [
        (1, "user", payload, 0), (2, "status", {"state": "thinking"}, 3)]  # fmt: skip
    assert all(before <= row.created <= timezone.now() for row in rows)
    history = [{"role": "user", "content": [{"type": "text", "text": "x\ty"}]}]
    changed = update_row(Conversation, conversation.id,
                         {"history": history, "last_seq": 2, "state": "running"})  # fmt: skip
    assert changed == 1
    assert update_row(Conversation, uuid.uuid4(), {"last_seq": 9}) == 0
    conversation.refresh_from_db()
    assert (conversation.history, conversation.last_seq, conversation.state) == (
        history, 2, "running")  # fmt: skip
    return "written"


def test_rows_inserted_and_updated_by_hand_read_back_as_the_orm_writes_them():
    assert check_writes() == "written"


def test_prepared_queries_give_what_their_querysets_give_for_every_reader():
    assert check_against_querysets() == 5 * 6


def test_a_prepared_query_is_compiled_once_per_connection_then_only_run():
    user = User.objects.create_user("ada", password="pw-ada-12345")
    conversation = Conversation.objects.create(owner=user, model="m")
    lookup = Prepared(lambda user_id, cid: readable_by(user_id).filter(id=cid).values_list(
        "id", "role"), int, uuid.UUID)  # fmt: skip
    counting = mock.patch.object(SQLCompiler, "as_sql", autospec=True,
                                 side_effect=SQLCompiler.as_sql)  # fmt: skip
    with counting as as_sql:
        assert lookup.values(user.pk, conversation.id) == [(conversation.id, "owner")]
    assert as_sql.call_count > 0  # the first call compiles
    compiled = mock.patch.object(SQLCompiler, "as_sql", side_effect=AssertionError("compiled"))
    with compiled, CaptureQueriesContext(connection) as queries:
        for _ in range(3):
            assert lookup.values(user.pk, conversation.id) == [(conversation.id, "owner")]
        assert lookup.values(user.pk + 1, conversation.id) == []
    assert len(queries) == 4  # one statement each, nothing compiled
    # An annotation named before a field: the columns come back in the order asked for.
    swapped = Prepared(lambda user_id, cid: readable_by(user_id).filter(id=cid).values_list(
        "role", "id"), int, uuid.UUID)  # fmt: skip
    expected = list(readable_by(user.pk).filter(id=conversation.id).values_list("role", "id"))
    assert swapped.values(user.pk, conversation.id) == expected == [("owner", conversation.id)]


def test_an_argument_missing_from_the_sql_or_computed_from_is_refused():
    unused = Prepared(lambda user_id, name: User.objects.filter(pk=user_id).values_list("pk"),
                      int, str)  # fmt: skip
    with pytest.raises(ValueError, match="not parameters"):
        unused.values(1, "x")
    computed = Prepared(lambda user_id: User.objects.filter(pk=user_id - 1).values_list("pk"),
                        int)  # fmt: skip
    with pytest.raises(ValueError, match="computed from an argument"):
        computed.values(1)
    later = Prepared(
        lambda when: User.objects.filter(last_login__gt=when - datetime.timedelta(days=1)),
        datetime.datetime,
    )
    with pytest.raises(ValueError, match="computed from an argument"):
        later.objects(timezone.now())


def test_a_prepared_update_changes_the_rows_its_queryset_would():
    ada = User.objects.create_user("ada", password="pw-ada-12345")
    bob = User.objects.create_user("bob", password="pw-bob-12345")
    rename = PreparedUpdate(lambda user_id, name: (User.objects.filter(pk=user_id),
                                                   {"first_name": name}), int, str)  # fmt: skip
    assert rename(ada.pk, "Ada") == 1
    assert rename(bob.pk, "Bob") == 1
    assert rename(bob.pk + 100, "nobody") == 0
    assert list(User.objects.order_by("pk").values_list("first_name", flat=True)) == ["Ada", "Bob"]
    # The prompt counter's windows, carried over as the queryset's CASE would.
    rate.count_prompt(ada.pk, 600)
    rate.count_prompt(ada.pk, 610)
    rate.count_prompt(ada.pk, 665)
    ada.refresh_from_db()
    assert (ada.rate_window, ada.rate_count, ada.rate_previous) == (11, 1, 2)


def test_prepared_queries_and_hand_built_writes_behave_the_same_on_postgresql(tmp_path):
    from testkit.live import LiveServer
    from tests.services import fresh_pg_database

    with fresh_pg_database(migrated=True) as database_url:
        server = LiveServer(tmp_path, DATABASE_URL=database_url)
        server.migrate()
        code = ("from tests.deploy.test_prepared import check_against_querysets, check_writes\n"
                "print(check_against_querysets(), check_writes())")  # fmt: skip
        assert server.manage("shell", "-c", code).strip().splitlines()[-1] == "30 written"


def test_a_finished_threads_connection_is_not_kept_alive_by_its_plans():
    """Plans hold their compiler, which holds its connection: kept in a table of the
    module's they kept every dead request thread's connection open, until PostgreSQL
    refused new clients."""
    user = User.objects.create_user("ada", password="pw-ada-12345")
    conversation = Conversation.objects.create(owner=user, model="m")
    seen = []

    def in_a_thread():
        from django.db import connections

        assert _DRIVABLE.objects(user.pk, conversation.id)[0].role == "owner"
        seen.append(weakref.ref(connections["default"]))
        connections["default"].close()

    worker = threading.Thread(target=in_a_thread)
    worker.start()
    worker.join()
    del worker
    gc.collect()
    assert len(seen) == 1 and seen[0]() is None
