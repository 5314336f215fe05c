"""The frame machinery every API format shares: token text, the per-stream label (tokenpath/audit.py) in every id,
StreamShape (one request shape's frames, rendered once and framed once per transfer coding), the bounded shape
cache, exact-size padding. What each format writes is in stub/formats/.

Token text varies from token to token because some gateways (LiteLLM) abort a stream whose chunks repeat.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

from tokenpath.audit import LABEL_CHARS, stream_label
from tokenpath.errors import UsageError
from tokenpath.wire.framing import chunks

WORDS = [
    "alpha",
    "bravo",
    "charlie",
    "delta",
    "echo",
    "foxtrot",
    "golf",
    "hotel",
    "india",
    "juliet",
    "kilo",
    "lima",
    "mike",
    "november",
    "oscar",
    "papa",
    "quebec",
    "romeo",
    "sierra",
    "tango",
    "uniform",
    "victor",
    "whiskey",
    "xray",
    "yankee",
    "zulu",
    "amber",
    "basil",
    "cedar",
    "dune",
    "ember",
    "fern",
    "garnet",
    "heath",
    "iris",
    "jade",
    "kelp",
    "lotus",
    "maple",
    "nettle",
    "olive",
    "pine",
    "quartz",
    "reed",
    "sage",
    "thyme",
    "umber",
    "vale",
    "willow",
    "yarrow",
    "zinnia",
    "acorn",
    "birch",
    "clover",
    "daisy",
    "elm",
    "flint",
    "grove",
    "hazel",
]


def token_text(index: int) -> str:
    """Never the same as its neighbour; the index keeps each token unique within a stream."""
    return f" {WORDS[index % len(WORDS)]}{index}"


def reasoning_text(index: int) -> str:
    """A reasoning delta's text: varies like token_text, and never reads as a token (load checks token numbers)."""
    return f" {WORDS[(index + 7) % len(WORDS)]}-thought{index}"


def token_bytes(index: int, frame_bytes: int | None, first_event_bytes: int | None) -> int | None:
    """The size token `index`'s frame is padded to: the first content frame may be made large on its own."""
    return first_event_bytes if index == 0 and first_event_bytes is not None else frame_bytes


PLACEHOLDER_LABEL = stream_label("")  # what a cached shape carries until a stream swaps in its own


@dataclass(frozen=True, slots=True)
class StreamRequest:
    """The parts of a request that shape the response, whatever its format."""

    kind: str  # OpenAI: "chat" or "completion"; every other format: its Api value
    model: str
    stream_id: str
    tokens: int
    include_usage: bool = False
    prompt_tokens: int = 0
    truncated: bool = False  # the request's own max-tokens field ended it early: stop reasons say so
    ttft_ms: float = 0.0  # the planned pacing, for the formats that report durations (Ollama, Bedrock)
    interval_ms: float = 0.0


class StreamShape:
    """Frames of one request shape, rendered once and framed once for each transfer coding; a stream only
    swaps in its own label (fixed length, so sizes and chunk headers stay valid). The stub writes these;
    the load client compares what it received against them.

    `lead`: frames due at once with the head (OpenAI's role delta, Anthropic's message_start...); `first_content`:
    the index of the first frame that carries content, which the audit records; `reasoning`: the reasoning deltas'
    indices (before first_content); `with_next`: frames due at the same moment as the frame after them (the events
    that close a thinking block and open the text one leave with the first content, not a token interval apart)."""

    def __init__(
        self,
        frames: list[bytes],
        *,
        lead: int = 0,
        first_content: int = 0,
        relabel: bool = False,
        reasoning: range = range(0),
        with_next: frozenset[int] = frozenset(),
    ) -> None:
        self.sizes = [len(f) for f in frames]
        self.lead = lead
        self.first_content = first_content
        self.reasoning = reasoning
        self.with_next = with_next
        self.first_token = reasoning.start if reasoning else first_content  # what --head-at first-token waits for
        self._relabel = relabel
        self._plain = frames
        self._chunked = chunks(frames)  # the last also ends the body, so it leaves in the same write
        self.nbytes = 2 * sum(self.sizes) + 8 * len(frames)  # both codings, as held in memory
        self._joined: dict[bool, bytes] = {}  # wire_body's templates, per coding, joined on first use
        self._whole_relabel: dict[bool, bool] = {}  # per coding: no placeholder spans two frames

    def wire(self, chunked: bool, cid: str) -> list[bytes]:
        """The frames as one stream writes them; `cid` is its completion id, whose tail is its label."""
        frames = self._chunked if chunked else self._plain
        if not self._relabel:
            return frames
        placeholder, real = PLACEHOLDER_LABEL.encode(), cid[-LABEL_CHARS:].encode()
        return [f.replace(placeholder, real) for f in frames]

    def wire_body(self, chunked: bool, cid: str) -> bytes:
        """`wire(chunked, cid)` joined: the frames joined once per shape, so a stream's body is one replace, not one
        per frame (the load client's integrity check). Where the placeholder would span two frames (never, with a
        fixed label inside each frame's JSON), the frames are relabelled one by one."""
        joined = self._joined.get(chunked)
        if joined is None:
            frames = self._chunked if chunked else self._plain
            joined = self._joined[chunked] = b"".join(frames)
            placeholder = PLACEHOLDER_LABEL.encode()
            self._whole_relabel[chunked] = joined.count(placeholder) == sum(f.count(placeholder) for f in frames)
        if not self._relabel:
            return joined
        if not self._whole_relabel[chunked]:
            return b"".join(self.wire(chunked, cid))
        return joined.replace(PLACEHOLDER_LABEL.encode(), cid[-LABEL_CHARS:].encode())


# Request shapes repeat (an experiment sends the same pacing thousands of times), so their frames are rendered
# once. The cache is bounded by bytes, not entries: one shape can be up to MAX_STREAM_BYTES x 2.
SHAPE_CACHE_BYTES = 64 << 20
_shapes: OrderedDict[Hashable, StreamShape] = OrderedDict()
_shapes_bytes = 0


def cached_shape(key: Hashable, render: Callable[[], StreamShape]) -> StreamShape:
    """The shape for `key`, rendered by `render` the first time (a huge one-off shape is never kept)."""
    global _shapes_bytes
    shape = _shapes.get(key)
    if shape is not None:
        _shapes.move_to_end(key)
        return shape
    shape = render()
    if shape.nbytes <= SHAPE_CACHE_BYTES // 4:
        _shapes[key] = shape
        _shapes_bytes += shape.nbytes
        while _shapes_bytes > SHAPE_CACHE_BYTES:
            _, old = _shapes.popitem(last=False)
            _shapes_bytes -= old.nbytes
    return shape


def cached_shape_bytes() -> int:
    return _shapes_bytes


def padded(encode: Callable[[dict[str, Any]], bytes], payload: dict[str, Any], size: int | None, pad_key: str) -> bytes:
    """`payload` encoded as one frame of exactly `size` bytes: a string member `pad_key` of dots is added after the
    real ones (clients ignore members they do not know). Raises UsageError when even an empty pad is too big."""
    frame = encode(payload)
    if size is None or len(frame) == size:
        return frame
    empty = encode({**payload, pad_key: ""})
    if len(empty) > size:
        raise UsageError(f"frame_bytes={size} is smaller than a token frame of this request ({len(frame)} bytes)")
    return encode({**payload, pad_key: "." * (size - len(empty))})
