"""Every streaming API format the stub speaks, one module each behind `base.ApiFormat`, and the router that finds a
request's format by its path (`wire.apis.SPECS` is the shared table of routes)."""

from __future__ import annotations

from tokenpath.errors import UsageError
from tokenpath.stub.config import StubConfig
from tokenpath.stub.formats.anthropic import AnthropicFormat
from tokenpath.stub.formats.base import ApiFormat, Route
from tokenpath.stub.formats.bedrock import BedrockFormat
from tokenpath.stub.formats.gemini import GeminiFormat
from tokenpath.stub.formats.ollama import OllamaFormat
from tokenpath.stub.formats.openai import OpenAIFormat, minimum_frame_bytes
from tokenpath.stub.formats.realtime import RealtimeFormat
from tokenpath.stub.formats.responses import ResponsesFormat
from tokenpath.stub.frames import StreamRequest
from tokenpath.wire.apis import Api

FORMATS: dict[Api, ApiFormat] = {
    f.api: f
    for f in (
        OpenAIFormat(),
        ResponsesFormat(),
        RealtimeFormat(),
        AnthropicFormat(),
        GeminiFormat(),
        BedrockFormat(),
        OllamaFormat(),
    )
}

__all__ = ["FORMATS", "ApiFormat", "Route", "Router", "check_frame_bytes", "check_start"]


class Router:
    """Path -> (format, route) over every format, served or not: a request on the route of a format this stub
    does not serve is answered in that format's shape, saying which it does serve."""

    def __init__(self) -> None:
        self._exact = {path: (f, Route(f.api, kind)) for f in FORMATS.values() for path, kind in f.routes().items()}
        self._patterned = [f for f in FORMATS.values() if not f.routes()]

    def find(self, path: str) -> tuple[ApiFormat, Route] | None:
        found = self._exact.get(path)
        if found is not None:
            return found
        for fmt in self._patterned:
            route = fmt.match(path)
            if route is not None:
                return fmt, route
        return None


def check_frame_bytes(cfg: StubConfig) -> None:
    """Fail at start, not on the first request, when frame_bytes cannot hold the frames of an API this stub serves.
    A stub serving every API (`--api all`, the default) is held to OpenAI's frames only: a 60-byte plain frame is
    the seed article's condition, and a request in a format whose frames cannot be that small is answered 400 with
    the reason (app.py), not refused for every format at start."""
    if cfg.frame_bytes is None:
        return
    apis = cfg.apis if len(cfg.apis) == 1 else [a for a in cfg.apis if a is Api.OPENAI]
    for api in apis:
        if api is Api.OPENAI:
            need = minimum_frame_bytes(StreamRequest("chat", cfg.model, "", cfg.tokens), cfg.format)
            if cfg.frame_bytes < need:
                hint = "" if cfg.format == "plain" else "; `format` plain frames can be as small as 8 bytes"
                raise UsageError(
                    f"`frame_bytes` {cfg.frame_bytes} cannot hold this stub's frames (need >= {need}){hint}"
                )
            continue
        req = StreamRequest(api.value, cfg.model, "", cfg.tokens, prompt_tokens=1)
        try:
            FORMATS[api].shape(req, cfg.pacing)
        except UsageError as exc:
            raise UsageError(f"`frame_bytes`: --api {api.value}: {exc}") from None


def check_start(cfg: StubConfig) -> None:
    """Every option the stub's flags set that a served API cannot honour fails at start, in one line: frame sizes
    (check_frame_bytes), and what comes before the first token (a keep-alive in a format that has none, reasoning
    where the frames have no field for it, a first event too small for its frame). With `--api all` only the OpenAI
    routes are held to it at start, as for frame_bytes; a request to another route is answered 400 with the reason."""
    check_frame_bytes(cfg)
    pacing = cfg.pacing
    if not pacing.before_first_token:
        return
    apis = cfg.apis if len(cfg.apis) == 1 else [a for a in cfg.apis if a is Api.OPENAI]
    for api in apis:
        fmt = FORMATS[api]
        if pacing.heartbeat_ms and fmt.heartbeat is None:
            raise UsageError(f"`heartbeat_ms`: --api {api.value}: {fmt.no_heartbeat}")
        kind = "chat" if api is Api.OPENAI else api.value
        try:
            fmt.shape(StreamRequest(kind, cfg.model, "", cfg.tokens, prompt_tokens=1), pacing)
        except UsageError as exc:
            raise UsageError(f"--api {api.value}: {exc}") from None
