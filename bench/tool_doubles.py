"""TEST DOUBLES of tools for the tool benchmarks (`voxroom bench tool-use`, `voxroom bench
--corpus tools`): `@tool` functions that answer from a fixed table after a fixed delay, so a
run is repeatable and the time a tool takes is known. They reach no weather service and set
no timer. A worker loads them as any Python tools module (`tools.python =
["bench.tool_doubles"]`).
"""

from __future__ import annotations

import asyncio
import hashlib

from agent.adapters.tools.python_tools import tool

# How long each double takes: a quick lookup (no filler is due) and a slow one (the filler
# after 0.7 s is).
WEATHER_DELAY_S = 0.3
FORECAST_DELAY_S = 1.5

_SKIES = ("sunny", "cloudy", "light rain", "snow showers", "fog", "clear skies")


def weather_of(city: str) -> tuple[int, str]:
    """The double's weather in `city`: degrees Celsius (0-20, a small number a voice says
    in words) and the sky, the same for the same city however it is capitalised."""
    key = " ".join(city.lower().replace(",", " ").split()) or "nowhere"
    h = int.from_bytes(hashlib.sha256(key.encode()).digest()[:4], "big")
    return h % 21, _SKIES[(h >> 8) % len(_SKIES)]


def weather_text(city: str) -> str:
    degrees, sky = weather_of(city)
    return f"{city}: {degrees} degrees Celsius, {sky}."


@tool(read_only=True)
async def get_weather(city: str) -> str:
    """The weather in a city right now.

    Args:
        city: The city's name, e.g. Oslo.
    """
    await asyncio.sleep(WEATHER_DELAY_S)
    return weather_text(city)


@tool(read_only=True)
async def get_forecast(city: str) -> str:
    """Tomorrow's weather forecast for a city.

    Args:
        city: The city's name, e.g. Oslo.
    """
    await asyncio.sleep(FORECAST_DELAY_S)
    return "Tomorrow in " + weather_text(city)


@tool
def set_timer(minutes: int) -> str:
    """Start a countdown timer that rings after the given number of minutes.

    Args:
        minutes: How many minutes the timer runs.
    """
    return f"A timer for {minutes} minutes is running."
