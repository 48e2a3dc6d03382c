"""The JSON of the engines' events (`event_json`), as its readers know it: `voxroom simulate
--events`, the turn logs, the turn store and the bench read these keys, in this order."""

from __future__ import annotations

from agent.events import (
    BargeIn,
    PlaybackDucked,
    SpeechEnd,
    SpeechStart,
    StateChanged,
    Transcript,
    event_json,
)
from state_machine.states import AgentState


def test_a_notice_is_reported_without_the_machines_bookkeeping() -> None:
    assert event_json(SpeechStart(0.5, utterance_id=1)) == {"t": 0.5, "type": "speech_start"}
    assert event_json(SpeechEnd(2.0, utterance_id=1)) == {"t": 2.0, "type": "speech_end"}
    barge = event_json(BargeIn(3.04, "Stop.", onset=3.0))
    assert list(barge.items()) == [("t", 3.04), ("type", "barge_in"), ("text", "Stop.")]


def test_an_event_is_its_time_its_kind_then_its_fields_in_order() -> None:
    final = event_json(Transcript(2.3, "What time is it?", final=True))
    assert list(final.items()) == [
        ("t", 2.3),
        ("type", "transcript"),
        ("text", "What time is it?"),
        ("final", True),
    ]
    assert event_json(PlaybackDucked(3.04, onset=3.0)) == {
        "t": 3.04,
        "type": "playback_ducked",
        "onset": 3.0,
    }
    assert event_json(StateChanged(1.0, AgentState.THINKING)) == {
        "t": 1.0,
        "type": "state",
        "state": "THINKING",
    }  # a state by its name


def test_on_another_origin_every_clock_time_moves_with_t() -> None:
    """`voxroom simulate --events` puts the events on the input's timeline: a duck's onset
    too, so that it subtracts from `t` as it did on the engine's clock."""
    ducked = event_json(PlaybackDucked(1003.0404, onset=1003.0001), origin=1000.0)
    assert ducked == {"t": 3.04, "type": "playback_ducked", "onset": 3.0}
    assert event_json(Transcript(1002.3, "Hi.", final=True), origin=1000.0)["t"] == 2.3
