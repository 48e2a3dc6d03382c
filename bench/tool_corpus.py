"""The tools corpus of `voxroom bench --corpus tools`: spoken requests whose scripted reply
calls a tool, and requests answered without one, for the time to the first word on a tool
turn against a plain one.

Kinds: `tool` calls `get_weather` (a double taking WEATHER_DELAY_S, 0.3 s: no filler is due),
`slow_tool` calls `get_forecast` (FORECAST_DELAY_S, 1.5 s: voxroom's filler is due after
0.7 s), `no_tool` is answered at once. The scripted LLM (a test double) makes the call as
OpenAI streams it and, once the result is in the messages, answers with it; both voxroom and
AgentSession are offered the same two doubles (bench/tool_doubles.py).

Each answer opens with words long enough that its first stretch of speech cannot be taken
for the filler ("One moment.", ~0.7 s) when the bench finds where the answer itself starts
(bench.measure.answer_onset).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from agent.testing.scripted_llm import ScriptedToolTurn
from bench.corpus import CACHE_DIR, Utterance, first_of_kinds, spoken_in_turn

__all__ = ["CACHE_DIR", "KINDS", "TOOL_KINDS", "check_kinds", "load_tool_corpus", "select"]

TOOL_KINDS = ("tool", "slow_tool")
KINDS = (*TOOL_KINDS, "no_tool")
# The tools both agents are offered (bench/tool_doubles.py).
OFFERED = ("get_weather", "get_forecast")

_WEATHER = "Here is what the weather service says about that: {result}"
_FORECAST = "Here is what the forecast service says about tomorrow: {result}"

_Item = tuple[str, str, str | ScriptedToolTurn]


def _weather(said: str, city: str) -> _Item:
    """A `tool` item: the scripted reply calls get_weather for `city`."""
    return "tool", said, ScriptedToolTurn("get_weather", {"city": city}, _WEATHER)


def _forecast(said: str, city: str) -> _Item:
    """A `slow_tool` item: the scripted reply calls get_forecast for `city`."""
    return "slow_tool", said, ScriptedToolTurn("get_forecast", {"city": city}, _FORECAST)


# (kind, what the user says, the scripted reply)
ITEMS: tuple[_Item, ...] = (
    _weather("What is the weather like in Oslo?", "Oslo"),
    _forecast("What will the weather be like in Paris tomorrow?", "Paris"),
    (
        "no_tool",
        "Who wrote Pride and Prejudice?",
        "Jane Austen wrote it, and it came out in eighteen thirteen.",
    ),
    _weather("Is it raining in London right now?", "London"),
    _forecast("What is the forecast for Madrid tomorrow?", "Madrid"),
    (
        "no_tool",
        "What is the capital of Australia?",
        "The capital of Australia is Canberra, not Sydney.",
    ),
    _weather("How warm is it in Rome today?", "Rome"),
    _forecast("Will it snow in Berlin tomorrow?", "Berlin"),
    (
        "no_tool",
        "Why is the sky blue?",
        "Sunlight scatters off the air, and blue light scatters the most.",
    ),
    _weather("What is the temperature in Vienna at the moment?", "Vienna"),
    _forecast("Do I need a coat in Dublin tomorrow?", "Dublin"),
    (
        "no_tool",
        "How many days are there in a leap year?",
        "A leap year has three hundred and sixty six days.",
    ),
)


def check_kinds(kinds: Sequence[str] | None) -> None:
    if kinds and (unknown := sorted(set(kinds) - set(KINDS))):
        raise ValueError(f"unknown kind(s) {unknown} for --corpus tools; known: {KINDS}")


async def load_tool_corpus(cache_dir: Path = CACHE_DIR) -> list[Utterance]:
    """Every item, said by voice i % 3 (bench.corpus.VOICES); speech cached."""
    said = await spoken_in_turn([text for _, text, _ in ITEMS], cache_dir)
    return [
        Utterance(f"{kind}{i:02d}-{voice}", voice, text, reply, pcm, kind=kind)
        for i, ((kind, text, reply), (voice, pcm)) in enumerate(zip(ITEMS, said, strict=True))
    ]


def select(
    items: Sequence[Utterance], kinds: Sequence[str] | None, per_kind: int | None
) -> list[Utterance]:
    return first_of_kinds(items, kinds, per_kind)


def worker_config() -> str:
    """The voxroom.toml that gives the default profile the two doubles."""
    names = ", ".join(f'"{n}"' for n in OFFERED)
    return f'[tools]\npython = ["bench.tool_doubles"]\n\n[profiles.default]\ntools = [{names}]\n'
