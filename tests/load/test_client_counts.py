"""Issue 39: the load client's per-read path by counts (tests/load/clientcounts.py, the harness). Over HTTP/1.1 a
read past the first content frame costs the clock, llhttp's feed with its body callback appending the piece, and the
read's mark: no event queue, no property, no decoder, no frame reader (those only while a read needs them)."""

from __future__ import annotations

from tests.load.clientcounts import count

# Python calls per frame the client received (builtins included; cProfile counts them all): its reads' (from
# data_received on, the head and the first frames' search included) and its end-of-stream check's. Before (main at
# 4a9746e, the recorder on ResponseParser's event queue, `complete` a property chain read twice per read, the body
# through _on_body and the decoder check every read): 20.0-25.2 per frame, 27.4-32.8 per read; after 13.3-16.7 and
# 18.8-28.3. Per frame, not per read: how many frames a read brings depends on the loop's load (more per read when
# it is busy, which lowers the count per frame), so the bound holds on a loaded host too.
# Then (main at b549536, 1.0-1.03 frames per read) 18.1-18.3 per frame, 17.3-17.4 per read; the wave-2 tree
# (cf2e15f, the same harness) 18.3 and 18.3. After (wt-perfclient): 12.4-12.5 per frame, 12.2-12.3 per read: llhttp
# appends each body piece itself (ClientConnection direct_body: no Python on_body between), a read's mark is the
# piece count (one len(), one array extend; counts become bytes once, at the end), the integrity check is one
# replace per body (StreamShape.wire_body), not one per frame (1.28 -> 0.28 calls per frame).
# Then (main at 06656f3) 10.9-11.3 per frame; after (issue 39, seventh part) 9.8-9.9: past the head each read goes to
# llhttp's own feed (ClientConnection.body_feed: receive_data's frame gone), the body is one buffer whose len() is
# the read's mark, the request is a template's copy, not JSON and headers built per stream.
MAX_CALLS_PER_FRAME = 10.5


def test_the_client_costs_a_bounded_number_of_calls_per_frame() -> None:
    counts = count(tokens=64, streams=4, seconds=1.0)
    assert counts.frames >= 64  # one stream at least, whole
    assert counts.calls_per_frame <= MAX_CALLS_PER_FRAME, f"{counts.calls_per_frame} calls per frame"
