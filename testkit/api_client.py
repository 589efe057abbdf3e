"""A small stdlib client for the HTTP + SSE API, for tests and the load script."""

from __future__ import annotations

import http.client
import json
import time
import uuid
from urllib.parse import urlparse


class Api:
    def __init__(self, base_url: str, token: str | None):
        parsed = urlparse(base_url)
        self.host, self.port, self.token = parsed.hostname, parsed.port, token

    def _headers(self, extra: dict | None = None) -> dict:
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        headers.update(extra or {})
        return headers

    def call(self, method: str, path: str, body=None, raw: bytes | None = None,
             content_type: str = "application/json"):  # fmt: skip
        connection = http.client.HTTPConnection(self.host, self.port, timeout=30)
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        headers = self._headers({"Content-Type": content_type})
        connection.request(method, path, body=data, headers=headers)
        response = connection.getresponse()
        text = response.read().decode()
        connection.close()
        try:
            payload = json.loads(text)
        except ValueError:
            payload = text
        return response.status, payload

    def form(self, path: str, fields: dict[str, str], files: dict[str, tuple[str, bytes]]):
        """A multipart/form-data POST: ``files`` maps a field to (file name, bytes)."""
        boundary = f"harness-{uuid.uuid4().hex}"
        parts = [f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n'
                 f"{value}\r\n".encode() for name, value in fields.items()]  # fmt: skip
        for name, (filename, data) in files.items():
            head = (
                f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"; '
                f'filename="{filename}"\r\nContent-Type: application/octet-stream\r\n\r\n'
            )
            parts.append(head.encode() + data + b"\r\n")
        body = b"".join(parts) + f"--{boundary}--\r\n".encode()
        return self.call("POST", path, raw=body,
                         content_type=f"multipart/form-data; boundary={boundary}")  # fmt: skip

    def events(self, conversation_id: str, *, since: int | None = None,
               last_event_id: int | None = None, timeout: float = 30,
               read_timeout: float | None = None):  # fmt: skip
        """Open the SSE stream; returns an iterator of ("event", id, data) and
        ("comment", text) items, and the response status. ``read_timeout``: how long
        each read of the stream waits once it is open (the answer is waited for as long
        as ``timeout``, which a loaded server may need)."""
        path = f"/api/conversations/{conversation_id}/events"
        if since is not None:
            path += f"?since={since}"
        extra = {"Last-Event-ID": str(last_event_id)} if last_event_id is not None else {}
        connection = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        connection.request("GET", path, headers=self._headers(extra))
        sock = connection.sock  # (the response may take it over: kept to set its timeout)
        response = connection.getresponse()
        if read_timeout is not None:
            sock.settimeout(read_timeout)
        return response, _parse(response, connection)


def _parse(response, connection):
    event_id, data = None, []
    try:
        while True:
            line = response.readline()
            if not line:
                return
            line = line.decode().rstrip("\n")
            if line.startswith(":"):
                yield ("comment", line[1:].strip())
            elif line.startswith("id: "):
                event_id = int(line[4:])
            elif line.startswith("data: "):
                data.append(line[6:])
            elif line == "" and data:
                yield ("event", event_id, json.loads("\n".join(data)))
                event_id, data = None, []
    finally:
        connection.close()


def read_until(stream, predicate, timeout: float = 20.0) -> list:
    """Items from the stream up to and including the first that satisfies ``predicate``."""
    items, deadline = [], time.monotonic() + timeout
    for item in stream:
        items.append(item)
        if predicate(item):
            return items
        if time.monotonic() > deadline:
            break
    raise AssertionError(f"stream ended or timed out; got {items[-5:]}")
