"""wire/h1status.py: the final status of an HTTP/1.x answer, read beside the probe, at every split of its bytes."""

from __future__ import annotations

import pytest

from tokenpath.wire.h1status import H1StatusSniffer

OK = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n"
HINTS = b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n"
REFUSED = b"HTTP/1.1 429 Too Many Requests\r\nContent-Length: 2\r\n\r\nno"


def sniffed(data: bytes, split: int, sniffer: H1StatusSniffer | None = None) -> int | None:
    sniffer = sniffer or H1StatusSniffer()
    sniffer.feed(data[:split])
    return sniffer.feed(data[split:])


@pytest.mark.parametrize(("data", "status"), [(OK, 200), (HINTS + REFUSED, 429), (b"HTTP/1.0 404 No\r\n\r\n", 404)])
def test_the_final_status_once_its_head_is_whole_at_every_split(data: bytes, status: int) -> None:
    for split in range(len(data) + 1):
        assert sniffed(data, split) == status, split
    head_end = data.index(b"\r\n\r\n", data.index(b" 103 ") if b" 103 " in data else 0) + 3
    sniffer = H1StatusSniffer()
    assert sniffer.feed(data[:head_end]) is None  # one byte short of the head: not yet


def test_an_interim_head_alone_is_no_status() -> None:
    sniffer = H1StatusSniffer()
    assert sniffer.feed(HINTS) is None
    assert not sniffer.done


def test_a_head_past_the_probes_limit_is_no_status() -> None:
    """The probe refuses a head once its reads pass the limit with the head still open: no status, never its 200."""
    sniffer = H1StatusSniffer(max_head_bytes=64)
    assert sniffer.feed(b"HTTP/1.1 200 OK\r\nX-Pad: " + b"a" * 60) is None
    assert sniffer.done
    assert sniffer.feed(b"\r\n\r\n") is None  # given up: later bytes are not read
    assert sniffed(OK, 10, H1StatusSniffer(max_head_bytes=len(OK))) == 200  # within it, by the same reads


def test_bytes_that_are_not_http_are_no_status() -> None:
    sniffer = H1StatusSniffer()
    assert sniffer.feed(b"\x16\x03\x01\x02\x00garbage\r\n\r\n") is None
    assert sniffer.done


def test_later_bytes_are_ignored_once_the_status_is_known() -> None:
    sniffer = H1StatusSniffer()
    assert sniffer.feed(OK) == 200
    assert sniffer.feed(b"zz\r\nnot a chunk") == 200  # a malformed body is the probe's to judge, not a status change
