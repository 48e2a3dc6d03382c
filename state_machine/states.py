"""The agent's conversational states, named as LiveKit's `lk.agent.state` attribute spells them."""

from __future__ import annotations

from enum import StrEnum


class AgentState(StrEnum):
    LISTENING = "listening"
    THINKING = "thinking"
    SPEAKING = "speaking"
