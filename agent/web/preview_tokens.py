"""The signed part of a preview's address, ``/preview/<conversation>/<port>/~<token>/…``.

A previewed page is sandboxed (an opaque origin): its browser sends it no cookies, so its
own sub-resources and sockets cannot be authorised by the session. The token names the
user, the conversation and the port, is signed with the deployment's secret and lasts
``MAX_AGE`` seconds; whoever presents it is still checked against the access rule on
every request (a revoked share ends it at once). The public address, visited by a signed-in
reader, redirects to a fresh one.
"""

from __future__ import annotations

import uuid

from django.core import signing

SALT = "harness.preview"
MAX_AGE = 3600
MARK = "~"  # the path segment that carries a token starts with it


def make(user_id: int, conversation_id: uuid.UUID, port: int) -> str:
    value = {"u": int(user_id), "c": conversation_id.hex, "p": int(port)}
    return MARK + signing.dumps(value, salt=SALT, compress=True)


def user_for(token: str, conversation_id: uuid.UUID, port: int) -> int | None:
    """The user a token was made for, if it is intact, recent and for this conversation
    and port."""
    if not token.startswith(MARK):
        return None
    try:
        value = signing.loads(token[len(MARK) :], salt=SALT, max_age=MAX_AGE)
    except signing.BadSignature:
        return None
    if (not isinstance(value, dict) or value.get("c") != conversation_id.hex
            or value.get("p") != port or not isinstance(value.get("u"), int)):  # fmt: skip
        return None
    return value["u"]
