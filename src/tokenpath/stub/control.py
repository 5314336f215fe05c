"""Asks a running stub for its audit (control plane: plain urllib, not the measured path)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from tokenpath.errors import PeerError


def fetch_audit(
    stub_url: str, stream_ids: list[str], *, with_log: bool = True, timeout_s: float = 10.0
) -> dict[str, Any]:
    """The stub's bulk audit answer for these streams: {"streams": [...], "missing": [...], "summary": {...}}."""
    url = f"{stub_url.rstrip('/')}/_tokenpath/audit?log={int(with_log)}"
    body = json.dumps({"ids": stream_ids}).encode()
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            result: dict[str, Any] = json.load(response)
            return result
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise PeerError(f"cannot read the stub's audit at {url}: {exc}") from None


def verdicts_by_id(audit: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["verdict"]["stream_id"]: e["verdict"] for e in audit.get("streams", [])}
