"""The stub's Realtime session (OpenAI's Realtime API, text only, on `GET /v1/realtime?model=...`): stub/websocket.py's
session with the Realtime client events instead of the Responses WebSocket mode's.

`session.created` goes out on connect (the API's first server event); `session.update` is answered
`session.updated`; `conversation.item.create` adds a user message (answered `conversation.item.added` and
`conversation.item.done`, the GA names); each `response.create` streams one response (stub/formats/realtime.py's
events, paced and audited as every format's stream is) over the conversation's text. Several responses per session,
one at a time: a `response.create` while one streams is answered as the API answers it, an `error` with code
`conversation_already_has_active_response` (seen in the wild: openai/openai-agents-python#1466, livekit/agents#6818),
and the running response goes on. A client event that is not JSON, not an object, or of a type this stub does not
take is an `error` event (the session stays open, as the API's errors mostly leave it); a binary message is closed
1003 by wire/websocket.py (the API's events are text).
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qsl

from tokenpath.clock import Clock
from tokenpath.serve.http import Request
from tokenpath.stub.websocket import StartResponse, WebSocketSession
from tokenpath.wire.formats.realtime import error_event
from tokenpath.wire.websocket import WebSocketLimits

__all__ = ["ACTIVE_RESPONSE", "RealtimeSession"]

TAKES = ("session.update", "conversation.item.create", "response.create")
ACTIVE_RESPONSE = "conversation_already_has_active_response"
MAX_ITEMS = 1_000  # conversation items a session keeps (their text is the next response's prompt)


class RealtimeSession(WebSocketSession):
    bad_request_code = "invalid_value"

    def __init__(
        self, request: Request, start: StartResponse, clock: Clock, limits: WebSocketLimits | None = None
    ) -> None:
        super().__init__(request, start, clock, limits)
        self._items: list[str] = []
        self._events = 0  # server events sent: their ids
        query = dict(parse_qsl(request.query))
        self._model = query.get("model", "")  # the API names the session's model in the URL
        self._session: dict[str, Any] = {
            "type": "realtime",
            "object": "realtime.session",
            "id": f"sess_{id(self):x}",
            "model": self._model,
            "output_modalities": ["text"],
            "instructions": "",
            "tools": [],
            "tool_choice": "auto",
            "max_output_tokens": "inf",
        }

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        self._send({"type": "session.created", "session": self._session})

    def _on_message(self, text: str) -> None:
        try:
            event = json.loads(text)
        except (ValueError, RecursionError) as exc:
            self._error(f"a client event must be JSON: {exc}", "invalid_json")
            return
        kind = event.get("type") if isinstance(event, dict) else None
        client_id = event.get("event_id") if isinstance(event, dict) else None
        client_id = client_id if isinstance(client_id, str) else None
        if kind == "session.update":
            update = event.get("session")
            if isinstance(update, dict):
                self._session.update({k: v for k, v in update.items() if k not in ("id", "object")})
            self._send({"type": "session.updated", "session": self._session})
        elif kind == "conversation.item.create":
            self._add_item(event.get("item"), client_id)
        elif kind == "response.create":
            self._create(event.get("response"), client_id)
        else:
            takes = ", ".join(repr(t) for t in TAKES)
            self._error(f"unknown client event type {kind!r}; this stub takes {takes}", "invalid_value", client_id)

    def _add_item(self, item: object, client_id: str | None) -> None:
        text = _user_text(item)
        if text is None:
            self._error("'item' must be a user message with input_text content", "invalid_value", client_id)
            return
        if len(self._items) >= MAX_ITEMS:
            self._error(f"this stub keeps at most {MAX_ITEMS} items per session", "invalid_value", client_id)
            return
        self._items.append(text)
        n = len(self._items)
        content = [{"type": "input_text", "text": text}]
        added = {"id": f"item_{id(self):x}_{n}", "object": "realtime.item", "type": "message", "role": "user"}
        previous = f"item_{id(self):x}_{n - 1}" if n > 1 else None
        for kind in ("conversation.item.added", "conversation.item.done"):
            self._send({"type": kind, "previous_item_id": previous, "item": {**added, "content": content}})

    def _create(self, response: object, client_id: str | None) -> None:
        if response is not None and not isinstance(response, dict):
            self._error("'response' must be an object", "invalid_value", client_id)
            return
        if self._current is not None:
            message = (
                "Conversation already has an active response in progress. "
                "Wait until the response is finished before creating a new one."
            )
            self._error(message, ACTIVE_RESPONSE, client_id)
            return
        body: dict[str, Any] = {**(response or {}), "input": "\n".join(self._items)}
        if self._model:
            body["model"] = self._model
        self._begin(body, client_id)

    def _error(self, message: str, code: str | None = None, client_id: str | None = None) -> None:
        self.write(self.encode(json.dumps(error_event(code, message, self._event_id(), client_id))))

    def _send(self, event: dict[str, Any]) -> None:
        rest = {k: v for k, v in event.items() if k != "type"}
        self.write(self.encode(json.dumps({"type": event["type"], "event_id": self._event_id(), **rest})))

    def _event_id(self) -> str:
        self._events += 1
        return f"event_{id(self):x}_s{self._events}"


def _user_text(item: object) -> str | None:
    """A message item's text (its input_text / text parts joined), or None when it is not one."""
    if not isinstance(item, dict) or item.get("type", "message") != "message":
        return None
    content = item.get("content")
    if not isinstance(content, list):
        return None
    parts = [p.get("text") for p in content if isinstance(p, dict) and p.get("type") in ("input_text", "text")]
    return "".join(p for p in parts if isinstance(p, str))
