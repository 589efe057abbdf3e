"""The XSS payloads of ../shared/conformance/xss, as one list of strings."""

from __future__ import annotations

import json

from tests.conftest import shared_path


def xss_payloads() -> list[str]:
    folder = shared_path("conformance", "xss")
    payloads: set[str] = set()
    for file in sorted(folder.glob("*.txt")):
        payloads.update(
            line for line in file.read_text(encoding="utf-8", errors="replace").splitlines()
            if line.strip()
        )  # fmt: skip
    for item in json.loads((folder / "dompurify_payloads.json").read_text()):
        payloads.add(item if isinstance(item, str) else json.dumps(item))
    for item in json.loads((folder / "h5sc_items.json").read_text()):
        payloads.add(item["data"] if isinstance(item, dict) else str(item))
    return sorted(payloads)
