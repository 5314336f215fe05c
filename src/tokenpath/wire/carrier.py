"""How a client's stream is carried, the one name for it wherever it is spelled (probe --transport, the matrix's
`transport` axis, ProbeConfig.transport): the format's own HTTP response (`sse`, whatever its framing), or its
WebSocket mode over an HTTP/1.1 upgrade (`websocket`: wire/websocket.py)."""

from __future__ import annotations

__all__ = ["SSE", "TRANSPORTS", "WEBSOCKET"]

SSE = "sse"
WEBSOCKET = "websocket"
TRANSPORTS = (SSE, WEBSOCKET)
