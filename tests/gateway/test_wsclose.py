"""How a WebSocket close crosses the gateway (gateway/wsclose.py): each row of the tables, and the codes no close
frame may carry never sent on."""

from __future__ import annotations

import pytest

from tokenpath.gateway.wsclose import MAX_REASON_BYTES, reason_text, to_client, to_upstream

UNSENDABLE = (1005, 1006, 1015)


@pytest.mark.parametrize(
    ("member", "client"),
    [(1000, 1000), (1001, 1001), (1005, 1000), (1008, 1008), (1009, 1009), (1011, 1011), (1013, 1013), (4001, 4001)],
)
def test_a_member_s_close_reaches_the_client(member: int, client: int) -> None:
    assert to_client(member, "why", by_member=True)[0] == client


@pytest.mark.parametrize("code", [1002, 1006, 1010, 1015, 2999])
def test_a_member_s_close_about_its_own_hop_is_an_internal_error_with_a_reason(code: int) -> None:
    sent, reason = to_client(code, "", by_member=True)
    assert sent == 1011
    assert reason


def test_the_gateway_s_own_close_of_a_member_is_1011_and_of_a_client_1001() -> None:
    assert to_client(1009, "a message over 10 bytes", by_member=False) == (1011, "upstream: a message over 10 bytes")
    assert to_upstream(1009, "a message over 10 bytes", by_client=False) == (1001, "client: a message over 10 bytes")


@pytest.mark.parametrize(
    ("client", "member"), [(1000, 1000), (1005, 1000), (1001, 1001), (1006, 1001), (1002, 1001), (1009, 1001)]
)
def test_a_client_s_close_reaches_the_member(client: int, member: int) -> None:
    assert to_upstream(client, "", by_client=True)[0] == member


@pytest.mark.parametrize("code", [*UNSENDABLE, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 3000, 4999])
def test_no_unsendable_code_is_ever_sent(code: int) -> None:
    for by_peer in (True, False):
        assert to_client(code, "", by_peer)[0] not in UNSENDABLE
        assert to_upstream(code, "", by_peer)[0] not in UNSENDABLE


def test_a_reason_fits_a_close_frame_cut_on_a_character() -> None:
    long = "é" * 100  # 200 bytes
    cut = reason_text(long)
    assert len(cut.encode()) <= MAX_REASON_BYTES
    assert long.startswith(cut)
    assert len(to_client(1000, long, by_member=True)[1].encode()) <= MAX_REASON_BYTES
