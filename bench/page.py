"""First load: what the chat page costs to transfer, and how fast a long one is served."""

from __future__ import annotations

import gzip
import re
import statistics
import time
import urllib.request

ASSET = re.compile(r'<(?:script[^>]*\ssrc|link[^>]*\shref)="(/static/[^"]+)"')


def _get(url: str, session: str | None = None) -> tuple[bytes, dict[str, str]]:
    headers = {"Accept-Encoding": "gzip"}
    if session:
        headers["Cookie"] = f"sessionid={session}"
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=60) as r:
        return r.read(), {k.lower(): v for k, v in r.headers.items()}


def transfer(base: str, path: str, session: str) -> dict:
    """Bytes on the wire (as sent, compressed when the server compresses) for the page and
    every script and stylesheet it loads, and the cache policy of each asset."""
    body, headers = _get(base + path, session)
    html = gzip.decompress(body).decode() if headers.get("content-encoding") == "gzip" else body
    items = [{"url": path, "bytes": len(body), "encoding": headers.get("content-encoding", ""),
              "cache_control": headers.get("cache-control", "")}]  # fmt: skip
    for asset in dict.fromkeys(ASSET.findall(str(html))):
        data, asset_headers = _get(base + asset.replace("&amp;", "&"))
        items.append({
            "url": asset,
            "bytes": len(data),
            "encoding": asset_headers.get("content-encoding", ""),
            "cache_control": asset_headers.get("cache-control", ""),
        })  # fmt: skip
    return {"total_bytes": sum(i["bytes"] for i in items), "items": items}


def serve_time(base: str, path: str, session: str, repeats: int = 15) -> dict:
    """Wall time of a full GET (request to last byte) of a page: the first load (nothing
    of it rendered in this process yet) and the median of ``repeats`` after it."""
    started = time.perf_counter()
    _get(base + path, session)
    first = (time.perf_counter() - started) * 1000
    _get(base + path, session)
    times, size = [], 0
    for _ in range(repeats):
        started = time.perf_counter()
        body, _ = _get(base + path, session)
        times.append((time.perf_counter() - started) * 1000)
        size = len(body)
    return {
        "first_ms": round(first, 1),
        "median_ms": round(statistics.median(times), 1),
        "max_ms": round(max(times), 1),
        "bytes": size,
        "repeats": repeats,
    }
