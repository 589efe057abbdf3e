"""A hostile user against the per-user bounds on projects: more projects than allowed
through the clone path, and more clones at once than allowed by sending the requests
together (a race between the count and the insert, as PostgreSQL runs them at once)."""

from __future__ import annotations

import json
import threading
import time

import pytest
from django.db import close_old_connections
from django.test import Client

from agent.models import Project, User
from agent.runs import projects
from agent.runs.projects import CLONES_AT_ONCE
from agent.web.api_tokens import create_token

pytestmark = pytest.mark.django_db(transaction=True)


def _post(token: str, **body):
    client = Client(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client.post("/api/projects", json.dumps(body), content_type="application/json")


def test_a_clone_counts_against_the_users_projects():
    ada = User.objects.create_user("ada")
    Project.objects.bulk_create(
        Project(owner=ada, name=f"p{n}", state=Project.State.FAILED, error="x")
        for n in range(projects.MAX_PROJECTS)
    )
    token = create_token(ada)[1]
    response = _post(token, name="one more", git_url="https://e.example/r.git")
    assert (response.status_code, response.json()["error"]) == (429, "too_many_projects")
    assert Project.objects.filter(owner=ada).count() == projects.MAX_PROJECTS


def test_clones_sent_together_still_run_at_most_three_at_once(net, remote):
    ada = User.objects.create_user("ada")
    token = create_token(ada)[1]
    remote.public = True
    remote.hold.clear()  # every clone stays ``cloning`` until the test lets them go
    many = 8
    start = threading.Barrier(many)
    answers: list[int] = []

    def ask() -> None:
        try:
            start.wait()
            answers.append(_post(token, name="x", git_url=remote.url("demo.git")).status_code)
        finally:
            close_old_connections()

    threads = [threading.Thread(target=ask) for _ in range(many)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    try:
        assert sorted(answers) == [201] * CLONES_AT_ONCE + [429] * (many - CLONES_AT_ONCE)
        assert Project.objects.filter(owner=ada).count() == CLONES_AT_ONCE
    finally:
        remote.hold.set()
        deadline = time.monotonic() + 60
        while Project.objects.filter(state=Project.State.CLONING).exists():
            assert time.monotonic() < deadline, "the clones did not end"
            time.sleep(0.1)
