"""The frame machinery every API format shares: token text, the per-stream label (tokenpath/audit.py) in every id,
StreamShape (one request shape's frames, rendered once and framed once per transfer coding), the bounded shape
cache, exact-size padding. What each format writes is in stub/formats/.

Token text varies from token to token because some gateways (LiteLLM) abort a stream whose chunks repeat.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Iterator
from dataclasses import dataclass
from itertools import islice
from typing import Any, TypeVar

from tokenpath.audit import LABEL_CHARS, stream_label
from tokenpath.errors import UsageError
from tokenpath.stub.config import MAX_STREAM_BYTES
from tokenpath.stub.loopshare import Steps
from tokenpath.wire.framing import LAST_CHUNK, chunks

T = TypeVar("T")

# A render yields every STEP_FRAMES frames: 0.2-0.5 ms of work at the 3-7 us a frame costs (Bedrock's the most), so a
# sliced build (stub/loopshare.py) holds the loop at most a step past SLICE_NS, and reads the clock once a step.
STEP_FRAMES = 64
STEP_BYTES = 256 << 10  # ... and at most this many bytes relabelled or framed (a closing event can hold all the text)

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
    # The most its frames may hold (extend_steps): MAX_STREAM_BYTES, or what the stub's own flags declared when more
    # (StubConfig.max_response_bytes: the operator's padded frames; a request's own pacing is held to the limit).
    max_bytes: int = MAX_STREAM_BYTES


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
        framed: tuple[list[int], list[bytes]] | None = None,
    ) -> None:
        """`framed`: the frames' sizes and chunk framing, when made already (`build`, in steps)."""
        sizes, chunked = framed if framed is not None else ([len(f) for f in frames], chunks(frames))
        self.sizes = sizes
        self.lead = lead
        self.first_content = first_content
        self.reasoning = reasoning
        self.with_next = with_next
        self.first_token = reasoning.start if reasoning else first_content  # what --head-at first-token waits for
        self._relabel = relabel
        self._plain = frames
        self._chunked = chunked  # the last also ends the body, so it leaves in the same write
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

    def wire_steps(self, chunked: bool, cid: str) -> Steps[list[bytes]]:
        """`wire(chunked, cid)`, relabelled STEP_FRAMES frames at a time."""
        frames = self._chunked if chunked else self._plain
        if not self._relabel:
            return frames
        placeholder, real = PLACEHOLDER_LABEL.encode(), cid[-LABEL_CHARS:].encode()
        out: list[bytes] = []
        for i, j in _steps(len(self.sizes), self.sizes.__getitem__):
            out += [f.replace(placeholder, real) for f in frames[i:j]]
            yield
        return out

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


def build_shape(
    frames: list[bytes],
    *,
    lead: int = 0,
    first_content: int = 0,
    relabel: bool = False,
    reasoning: range = range(0),
    with_next: frozenset[int] = frozenset(),
) -> Steps[StreamShape]:
    """`StreamShape(frames, ...)`, its sizes and chunk framing made STEP_FRAMES frames at a time (the same bytes:
    each frame one chunk, the last also ending the body)."""
    sizes: list[int] = []
    chunked: list[bytes] = []
    # fewer frames a step when they hold more than STEP_BYTES: a closing event can hold the whole text, and four of
    # them framed in one step held the loop 2.5-6 ms
    for i, j in _steps(len(frames), lambda k: len(frames[k])):
        part = frames[i:j]
        sizes += map(len, part)
        chunked += chunks(part, last=False)
        yield
    if chunked:
        chunked[-1] += LAST_CHUNK
    return StreamShape(
        frames,
        lead=lead,
        first_content=first_content,
        relabel=relabel,
        reasoning=reasoning,
        with_next=with_next,
        framed=(sizes, chunked),
    )


def _steps(n: int, size: Callable[[int], int]) -> Iterator[tuple[int, int]]:
    """Bounds of the frames (of `n`, frame k of `size(k)` bytes) each step takes: STEP_FRAMES, fewer when they hold
    more than STEP_BYTES (at least one). Sizes are asked for as the steps go, never all at once."""
    i = 0
    while i < n:
        j, nbytes = i, 0
        while j < n and j - i < STEP_FRAMES and (nbytes < STEP_BYTES or j == i):
            nbytes += size(j)
            j += 1
        yield i, j
        i = j


def extend_steps(out: list[bytes], items: Iterable[bytes], max_bytes: int) -> Steps[None]:
    """`out.extend(items)`, STEP_FRAMES items at a time: a render's loop over its tokens, yielding between steps.
    The response is held to `max_bytes` (StreamRequest.max_bytes) as it is rendered, whatever made its frames large
    (a padded frame_bytes is checked before; an unpadded frame grows with the model's name, up to 1.5 KB each, and
    100,000 of them were rendered, 172 MB, for a request whose answer the stub's rule refuses)."""
    total = sum(map(len, out))
    it = iter(items)
    while part := list(islice(it, STEP_FRAMES)):
        out += part
        total += sum(map(len, part))
        if total > max_bytes:
            raise UsageError(f"the response would be larger than {max_bytes} bytes (its frames rendered)")
        yield


# Request shapes repeat (an experiment sends the same pacing thousands of times), so their frames are rendered
# once. The cache is bounded by bytes, not entries: one shape can be up to MAX_STREAM_BYTES x 2.
SHAPE_CACHE_BYTES = 64 << 20
_shapes: OrderedDict[Hashable, StreamShape] = OrderedDict()
_shapes_bytes = 0


def cached_shape(key: Hashable, render: Callable[[], StreamShape]) -> StreamShape:
    """The shape for `key`, rendered by `render` the first time (a huge one-off shape is never kept)."""
    shape = _cached(key)
    if shape is None:
        shape = render()
        _keep(key, shape)
    return shape


def cached_shape_steps(key: Hashable, render: Callable[[], Steps[StreamShape]]) -> Steps[StreamShape]:
    """`cached_shape` of a render that yields between its steps: a cached shape is returned with no step at all."""
    shape = _cached(key)
    if shape is None:
        shape = yield from render()
        _keep(key, shape)
    return shape


def _cached(key: Hashable) -> StreamShape | None:
    shape = _shapes.get(key)
    if shape is not None:
        _shapes.move_to_end(key)
    return shape


def _keep(key: Hashable, shape: StreamShape) -> None:
    global _shapes_bytes
    # Already there: another request's build of the same shape, sliced too, ended first (the same frames).
    if shape.nbytes > SHAPE_CACHE_BYTES // 4 or key in _shapes:
        return
    _shapes[key] = shape
    _shapes_bytes += shape.nbytes
    while _shapes_bytes > SHAPE_CACHE_BYTES:
        _, old = _shapes.popitem(last=False)
        _shapes_bytes -= old.nbytes


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
