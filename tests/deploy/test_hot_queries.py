"""The queries every frame, prompt and stored batch runs: the right rows for every kind of
reader, in as few statements as they take, and writes that read back as the ORM stores them;
on SQLite here and on PostgreSQL in a live database."""

from __future__ import annotations

import gc
import threading
import uuid
import weakref
from decimal import Decimal

import pytest
from django.contrib.sessions.backends.db import SessionStore
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from agent.access import conversation_for
from agent.models import Conversation, Event, Membership, User
from agent.runs import eventlog, rate
from agent.runs.claim import RunRefused, driven_by
from agent.web.revocation import NOT_FOUND, SIGNED_OUT, socket_access

pytestmark = pytest.mark.django_db(transaction=True)

NAMES = ("owner", "collab", "viewer", "stranger", "gone")
KINDS = ("private", "shared", "team", "running", "orphan", "missing")
# The role each reader has on each conversation (None: cannot read it): an inactive owner's
# conversation and an inactive reader read nothing.
ROLES = {
    "owner": ("owner", "owner", "owner", "owner", None, None),
    "collab": (None, "collaborator", "viewer", None, None, None),
    "viewer": (None, "viewer", "viewer", None, None, None),
    "stranger": (None, None, "viewer", None, None, None),
    "gone": (None, None, None, None, None, None),
}


def _people_and_conversations():
    """Every kind of reader: owner, collaborator, viewer, stranger, an inactive user; a
    private, a shared, a team and a running conversation, and one of an inactive owner."""
    users = {name: User.objects.create_user(name, password=f"pw-{name}-12345") for name in NAMES}
    User.objects.filter(username="gone").update(is_active=False)
    owner = users["owner"]
    private = Conversation.objects.create(owner=owner, model="m")
    shared = Conversation.objects.create(owner=owner, model="m", title="shared")
    Membership.objects.create(conversation=shared, user=users["collab"], role="collaborator")
    Membership.objects.create(conversation=shared, user=users["viewer"], role="viewer")
    team = Conversation.objects.create(owner=owner, model="m", team=True)
    running = Conversation.objects.create(owner=owner, model="m", state="running")
    orphan = Conversation.objects.create(owner=users["gone"], model="m")
    return users, [private.id, shared.id, team.id, running.id, orphan.id, uuid.uuid4()]


def _one_query(call, count: int = 1):
    with CaptureQueriesContext(connection) as queries:
        result = call()
    assert len(queries) == count, [q["sql"] for q in queries]
    return result


def _simple_queries(call, most: int):
    """``call``'s result, checked to have run at most ``most`` statements, none with a
    subquery: the checks a prompt pays are plain lookups by key, cheap to build (the
    access rule's subqueries cost more to compile than several of these to run)."""
    with CaptureQueriesContext(connection) as queries:
        result = call()
    statements = [q["sql"] for q in queries]
    assert len(statements) <= most, statements
    assert all(sql.upper().count("SELECT") <= 1 for sql in statements), statements
    return result


def check_lookups() -> int:
    """The socket's credential check, the claim's lookup and the one-conversation lookup
    for every reader and conversation: each the reader's role, in a few plain lookups (the
    owner's own conversation, the hot path, in the fewest). Returns the cases checked (the
    PostgreSQL test below runs it too, in a live database)."""
    users, ids = _people_and_conversations()
    session = SessionStore()
    session.create()
    cases = 0
    for name, user in users.items():
        user.refresh_from_db()
        auth_hash = user.get_session_auth_hash()
        for cid, role in zip(ids, ROLES[name], strict=True):
            own = role == "owner"
            found = _simple_queries(lambda: conversation_for(user, cid), 1 if own else 3)  # noqa: B023
            assert (found.role if found else None) == role, (name, cid)
            check = lambda: socket_access(cid, user.pk, session.session_key, auth_hash)  # noqa: B023, E731
            access = _simple_queries(check, 3 if own else 4)
            assert access == ((None, auth_hash, role) if role else (NOT_FOUND, None, None))
            gone = socket_access(cid, user.pk, "no-such-session", auth_hash)
            assert gone == ((SIGNED_OUT, None, None) if role else (NOT_FOUND, None, None))
            if role is None:
                with pytest.raises(RunRefused):
                    driven_by(cid, user.pk)
            elif role == "viewer":
                with pytest.raises(RunRefused, match="not prompt"):
                    driven_by(cid, user.pk)
            else:
                # (the owner's: whether it is shared, for the author's name; a
                # collaborator's prompt names its author: their name, read apart)
                lookup = lambda: driven_by(cid, user.pk)  # noqa: B023, E731
                conversation, _ = _simple_queries(lookup, 2 if own else 4)
                assert (conversation.id, conversation.role) == (cid, role)
            cases += 1
    # The claim's row comes with its owner: no query for it.
    owner, shared = users["owner"], ids[1]
    conversation, author = _simple_queries(lambda: driven_by(shared, owner.pk), 2)
    with CaptureQueriesContext(connection) as queries:
        assert conversation.owner.username == author == "owner"
        assert conversation.title == "shared"
    assert len(queries) == 0
    return cases


def check_writes() -> str:
    """A stored batch's rows and its conversation's totals, as the ORM writes and reads
    them: JSON, the time of ``auto_now_add``, sums added in the database; partial text of
    many conversations in two statements, ``last_seq`` never moving back."""
    owner = User.objects.create_user("writer", password="pw-writer-12345")
    conversation = Conversation.objects.create(owner=owner, model="m", input_tokens=5)
    payload = {"type": "user", "seq": 1, "content": 'héllo \u2028 "quoted"', "n": [1, 2.5],
               "timestamp": 1_700_000_000_000}  # fmt: skip
    usage = {"type": "usage", "seq": 2, "timestamp": 1_700_000_000_000, "input_tokens": 7,
             "output_tokens": 3, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0,
             "cost_usd": 0.25, "branch": 3}  # fmt: skip
    history = [{"role": "user", "content": [{"type": "text", "text": "x\ty"}]}]
    before = timezone.now()
    with transaction.atomic():
        (meter,) = eventlog._apply_group(
            [eventlog.Batch(conversation.id, [payload, usage], history)]
        )
    rows = list(Event.objects.filter(conversation=conversation).order_by("seq"))
    assert [(r.seq, r.type, r.payload, r.branch) for r in rows] == [
        (1, "user", payload, 0), (2, "usage", usage, 3)]  # fmt: skip
    assert all(before <= row.created <= timezone.now() for row in rows)
    conversation.refresh_from_db()
    assert (conversation.history, conversation.last_seq) == (history, 2)
    assert (conversation.input_tokens, conversation.output_tokens) == (12, 3)
    assert conversation.cost_usd == Decimal("0.25")
    assert meter.input_tokens == 12 and "history" in meter.get_deferred_fields()
    others = [Conversation.objects.create(owner=owner, model="m") for _ in range(3)]
    Conversation.objects.filter(pk=others[2].pk).update(last_seq=50)
    deltas = [eventlog.Batch(c.id, [{"type": "text_delta", "seq": s, "content": "a"},
                                    {"type": "text_delta", "seq": s + 1, "content": "b"}])
              for c, s in zip(others, (10, 20, 30), strict=True)]  # fmt: skip
    with transaction.atomic(), CaptureQueriesContext(connection) as queries:
        assert eventlog._apply_group(deltas) == [None, None, None]
    assert len(queries) == 2, [q["sql"] for q in queries]
    seqs = Conversation.objects.filter(pk__in=[c.pk for c in others]).order_by("last_seq")
    assert list(seqs.values_list("last_seq", flat=True)) == [11, 21, 50]
    stored = Event.objects.filter(conversation=others[0]).values_list("seq", "payload")
    assert [(seq, p["content"]) for seq, p in stored] == [(11, "ab")]
    return "written"


def test_every_reader_gets_their_role_in_a_few_plain_lookups():
    assert check_lookups() == 5 * 6


def test_stored_batches_read_back_as_the_orm_writes_them():
    assert check_writes() == "written"


def test_a_prompt_is_counted_and_checked_on_its_locked_row():
    ada = User.objects.create_user("ada", password="pw-ada-12345")
    bob = User.objects.create_user("bob", password="pw-bob-12345")
    with transaction.atomic():  # (in the claim's transaction: no statement of its own)
        assert _one_query(lambda: rate.count_prompt(ada.pk, 600, limit=5), 2)
    # The windows carried over: this minute's count, the one before's.
    rate.count_prompt(ada.pk, 610)
    rate.count_prompt(ada.pk, 665)
    ada.refresh_from_db()
    assert (ada.rate_window, ada.rate_count, ada.rate_previous) == (11, 1, 2)
    # Within the limit only (the refusal reads and writes nothing more); nobody else's row
    # changes.
    assert rate.count_prompt(ada.pk, 666, limit=4)
    with transaction.atomic():
        assert not _one_query(lambda: rate.count_prompt(ada.pk, 666, limit=4))
    ada.refresh_from_db()
    bob.refresh_from_db()
    assert (ada.rate_count, bob.rate_count) == (2, 0)


def test_lookups_and_writes_behave_the_same_on_postgresql(tmp_path):
    from testkit.live import LiveServer
    from tests.services import fresh_pg_database

    with fresh_pg_database() as database_url:
        server = LiveServer(tmp_path, DATABASE_URL=database_url)
        server.manage("migrate", "-v", "0")
        code = ("from tests.deploy.test_hot_queries import check_lookups, check_writes\n"
                "print(check_lookups(), check_writes())")  # fmt: skip
        assert server.manage("shell", "-c", code).strip().splitlines()[-1] == "30 written"


def test_a_finished_threads_connection_is_not_kept_alive():
    """Nothing of the lookups outlives its thread's connection: kept in a table of a
    module's, every dead request thread's connection stayed open, until PostgreSQL
    refused new clients."""
    user = User.objects.create_user("ada", password="pw-ada-12345")
    conversation = Conversation.objects.create(owner=user, model="m")
    seen = []

    def in_a_thread():
        from django.db import connections

        assert driven_by(conversation.id, user.pk)[0].role == "owner"
        seen.append(weakref.ref(connections["default"]))
        connections["default"].close()

    worker = threading.Thread(target=in_a_thread)
    worker.start()
    worker.join()
    del worker
    gc.collect()
    assert len(seen) == 1 and seen[0]() is None
