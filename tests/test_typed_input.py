"""The bounds on typed messages (agent/transports/typed_input.py): length while reading, rate
per sender."""

from __future__ import annotations

from agent.transports.typed_input import BoundedMessage, TypedInput


def test_a_message_within_the_bound_is_read_whole() -> None:
    message = BoundedMessage(10)
    assert message.add("hello ") and message.add("you!")
    assert message.text == "hello you!" and not message.over


def test_a_message_over_the_bound_stops_the_reading_and_keeps_nothing() -> None:
    message = BoundedMessage(2_000)
    chunks = iter(["x" * 1_500, "y" * 1_500, "z" * 1_500])
    read = 0
    for chunk in chunks:
        read += 1
        if not message.add(chunk):
            break
    assert read == 2 and message.over and message.text == ""
    assert list(chunks) == ["z" * 1_500]  # the rest was never asked for
    assert not message.add("more")
    assert "2000 characters" in message.refusal()


def test_a_flood_is_refused_with_the_wait_then_allowed_again() -> None:
    now = [0.0]
    policy = TypedInput(per_min=20, burst=3, clock=lambda: now[0])
    assert [policy.admit("user-1") for _ in range(3)] == [None, None, None]
    refusal = policy.admit("user-1")
    assert refusal is not None and "too many messages" in refusal and "wait 3 s" in refusal
    assert policy.admit("someone-else") is None  # a bucket per sender
    now[0] = 3.0  # one message every 3 s
    assert policy.admit("user-1") is None
    assert policy.admit("user-1") is not None
