"""Python functions as tools: `@tool` marks one, its type hints and docstring give the schema,
and the modules named in `tools.python` are searched for them at start.

    @tool(read_only=True)
    def get_weather(city: str, unit: Literal["C", "F"] = "C") -> str:
        '''The weather in a city now.

        Args:
            city: The city's name, e.g. Oslo.
        '''

A sync function runs in a thread (it may block); an async one is awaited. A parameter
annotated `ToolContext` receives the session's context and is not shown to the LLM.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import json
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar, overload

from agent.adapters.tools.base import Tool, ToolContext
from agent.adapters.tools.schema import describe_function
from agent.engines import ToolSpec

F = TypeVar("F", bound=Callable[..., Any])
_MARK = "__voxroom_tool__"


@dataclass(frozen=True)
class ToolOptions:
    name: str | None
    read_only: bool
    timeout_s: float | None


@overload
def tool(fn: F, /) -> F: ...


@overload
def tool(
    *, name: str | None = None, read_only: bool = False, timeout_s: float | None = None
) -> Callable[[F], F]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    read_only: bool = False,
    timeout_s: float | None = None,
) -> Any:
    """Mark `fn` as a tool (it stays a plain function). `read_only=True` lets it run on a
    speculative start; leave it False for anything that changes the world."""

    def mark(f: F) -> F:
        setattr(f, _MARK, ToolOptions(name, read_only, timeout_s))
        return f

    return mark if fn is None else mark(fn)


def is_tool(obj: object) -> bool:
    return isinstance(getattr(obj, _MARK, None), ToolOptions)


def python_tool(fn: Callable[..., Any], *, source: str, default_timeout_s: float) -> Tool:
    """The Tool of a `@tool` function; TypeError when its hints have no JSON schema."""
    options: ToolOptions = getattr(fn, _MARK, ToolOptions(None, False, None))
    description, parameters = describe_function(fn, skip=_is_context)
    context_params = [p for p, hint in typing.get_type_hints(fn).items() if _is_context(hint)]
    run_sync = not inspect.iscoroutinefunction(fn)

    async def invoke(args: dict[str, Any], ctx: ToolContext) -> str:
        kwargs = {**args, **dict.fromkeys(context_params, ctx)}
        result = await (asyncio.to_thread(fn, **kwargs) if run_sync else fn(**kwargs))
        return result if isinstance(result, str) else _as_text(result)

    return Tool(
        spec=ToolSpec(options.name or fn.__name__, description, parameters),
        read_only=options.read_only,
        timeout_s=options.timeout_s or default_timeout_s,
        source=source,
        invoke=invoke,
    )


def module_tools(module_name: str, *, default_timeout_s: float) -> list[Tool]:
    """The `@tool` functions of a module, imported now. ImportError (with the module's name
    and the cause) when it cannot be imported; TypeError for a function with bad hints."""
    try:
        module = importlib.import_module(module_name)
    except Exception as e:  # the user's module: any error in it is an error of importing it
        raise ImportError(
            f"cannot import tools module {module_name!r}: {type(e).__name__}: {e}"
        ) from e
    return marked_tools(module, source=f"python:{module_name}", default_timeout_s=default_timeout_s)


def marked_tools(module: types.ModuleType, *, source: str, default_timeout_s: float) -> list[Tool]:
    # Those defined there: a tool imported from another module is that module's.
    found = [
        obj
        for obj in vars(module).values()
        if is_tool(obj) and getattr(obj, "__module__", None) == module.__name__
    ]
    return [python_tool(fn, source=source, default_timeout_s=default_timeout_s) for fn in found]


def _is_context(hint: Any) -> bool:
    return hint is ToolContext


def _as_text(result: Any) -> str:
    """What a tool returned that is not text: JSON when it can be, else its repr."""
    if result is None:  # a function that acts and returns nothing
        return "Done."
    try:
        return json.dumps(result, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return repr(result)
