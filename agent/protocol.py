"""Every name the agent and its clients agree on, once: the topics of the text streams, the
participant attributes, the track names and the metadata keys, and the payload of
`voxroom.metrics`. The web page's copies are in web/src (tests/test_web_server.py checks
them); web/README.md documents them.

- `lk.*`: LiveKit Agents' conventions, which every LiveKit client reads: the agent's state,
  `lk.transcription` streams of both sides' words, and `lk.chat`: what the user types to the
  agent (a user turn like a spoken one), and the agent's reply when it refuses a message.
- `voxroom.metrics`: one text stream (or data packet) per finished turn, a JSON object
  `{"type": "turn", "interrupted": bool, "latency_ms": {stage: ms | null}}` with the stages of
  `TurnRecord.latency_ms()` (endpoint, stt, llm_first_token, first_chunk, tts_first_audio,
  voice_to_voice).
- `voxroom.copilot`: one text stream per answer; its chunks are deltas of the answer's text.
- `voxroom.context.status` (agent.copilot.room writes it): one JSON receipt per document the
  candidate sent, `{"name", "status": "indexed" | "refused", "pieces", "error"?}`.
"""

from __future__ import annotations

import json

# --- LiveKit Agents' names ---------------------------------------------------------------------
ATTR_AGENT_STATE = "lk.agent.state"
TOPIC_TRANSCRIPTION = "lk.transcription"
ATTR_SEGMENT_ID = "lk.segment_id"
ATTR_TRACK_ID = "lk.transcribed_track_id"
ATTR_TRANSCRIPTION_FINAL = "lk.transcription_final"
TOPIC_CHAT = "lk.chat"

# --- tracks and identities ---------------------------------------------------------------------
AGENT_VOICE_TRACK = "agent-voice"
MEETING_TRACK = "meeting-audio"  # a bridge's capture of the computer's output (the meeting)
BRIDGE_MIC_TRACK = "user-mic"  # a bridge's microphone, with `voxroom bridge --mic`
COPILOT_VOICE_TRACK = "copilot-voice"  # spoken answers, subscribed by the candidate only
BRIDGE_IDENTITY_PREFIX = "meeting-bridge-"  # `voxroom bridge`'s default identity
DIRECT_CHANNEL_LABEL = "voxroom"  # direct mode's data channel (agent.transports.direct)

# --- dispatch and room metadata keys -------------------------------------------------------------
KEY_USER = "voxroom.user"  # the identity the agent serves
KEY_PROFILE = "voxroom.profile"  # the agent profile ([profiles.NAME]) the room gets
KEY_MODE = "voxroom.mode"
MODES = ("voice", "copilot")
KEY_CANDIDATE = "voxroom.candidate"
DOCUMENT_KEYS = {"voxroom.resume": "resume", "voxroom.job_description": "job_description"}

# --- participant and stream attributes ---------------------------------------------------------
# On a bridge's token: the identity of the candidate it serves
# (agent.transports.tokens.create_bridge_token).
ATTR_BRIDGE_CANDIDATE = "voxroom.bridge.candidate"
# On the `lk.transcription` streams of what the copilot heard of the meeting: "interviewer".
ATTR_SPEAKER = "voxroom.speaker"
SPEAKER_INTERVIEWER = "interviewer"

# --- the interview copilot's topics and attributes ---------------------------------------------
TOPIC_COPILOT = "voxroom.copilot"
TOPIC_COPILOT_CONTROL = "voxroom.copilot.control"
TOPIC_CONTEXT = "voxroom.context"
TOPIC_CONTEXT_STATUS = "voxroom.context.status"
ATTR_CONTEXT_NAME = "voxroom.context.name"
ATTR_ANSWER_ID = "voxroom.copilot.answer_id"
ATTR_QUESTION = "voxroom.copilot.question"
ATTR_ANSWER_FINAL = "voxroom.copilot.final"
ATTR_ANSWER_STATUS = "voxroom.copilot.status"
ATTR_SPEAK = "voxroom.copilot.speak"  # "true" | "false" | "unavailable" (no TTS)
# How many document pieces the LLM's prompt cache holds as the shared prefix ("0" at first):
# answers are fastest once it counts every piece the documents were indexed into.
ATTR_WARM_PIECES = "voxroom.copilot.warm_pieces"
# "false" when the documents are too long to be that prefix: every answer then carries the
# pieces nearest to its question, and warm_pieces stays "0".
ATTR_DOCUMENTS_FIT = "voxroom.copilot.documents_fit"

# --- per-turn latencies --------------------------------------------------------------------------
TOPIC_METRICS = "voxroom.metrics"


def transcription_attributes(segment: str, *, final: bool, track_id: str = "") -> dict[str, str]:
    """The attributes of an `lk.transcription` stream: its segment, whether it is final, and
    the track it transcribes (when known)."""
    attributes = {ATTR_SEGMENT_ID: segment, ATTR_TRANSCRIPTION_FINAL: "true" if final else "false"}
    if track_id:
        attributes[ATTR_TRACK_ID] = track_id
    return attributes


def turn_metrics_message(interrupted: bool, latency_ms: dict[str, float | None]) -> str:
    """The `voxroom.metrics` payload for a finished turn (the turn engine's "turn" event)."""
    return json.dumps({"type": "turn", "interrupted": interrupted, "latency_ms": latency_ms})
