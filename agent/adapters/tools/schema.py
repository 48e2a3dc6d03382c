"""A Python function's JSON schema, from its type hints and docstring: what the LLM is told
about a Python tool's arguments."""

from __future__ import annotations

import inspect
import re
import types
import typing
from collections.abc import Callable
from typing import Any, Literal, Union

_SCALARS: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}
_ARGS_HEADER = re.compile(r"^\s*(Args|Arguments|Parameters):\s*$")
_ARG_LINE = re.compile(r"^\s*(\*{0,2}\w+)\s*(\([^)]*\))?\s*:\s*(.*)$")


def describe_function(
    fn: Callable[..., Any], skip: Callable[[Any], bool] = lambda _hint: False
) -> tuple[str, dict[str, Any]]:
    """The description (the docstring's first paragraph) and the parameters' JSON schema (an
    object). Parameters whose hint `skip` accepts (an injected context) are left out.
    TypeError names a parameter without a hint or with one JSON cannot express."""
    hints = typing.get_type_hints(fn)
    description, arg_docs = parse_docstring(inspect.getdoc(fn) or "")
    properties: dict[str, Any] = {}
    required: list[str] = []
    for name, param in inspect.signature(fn).parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise TypeError(f"{fn.__name__}: *{name} cannot be a tool's argument")
        if name not in hints:
            raise TypeError(f"{fn.__name__}: parameter {name!r} has no type hint")
        if skip(hints[name]):
            continue
        schema, optional = json_schema(hints[name], f"{fn.__name__}({name})")
        if name in arg_docs:
            schema["description"] = arg_docs[name]
        if param.default is not param.empty:
            optional = True
            if param.default is not None:
                schema["default"] = param.default
        properties[name] = schema
        if not optional:
            required.append(name)
    parameters: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        parameters["required"] = required
    return description, parameters


def json_schema(hint: Any, where: str) -> tuple[dict[str, Any], bool]:
    """The schema of a type hint, and whether it admits None (an Optional: not required)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        if len(rest) != 1:
            raise TypeError(f"{where}: only Optional[X] unions can be described, got {hint!r}")
        return json_schema(rest[0], where)[0], len(rest) < len(args)
    if hint in _SCALARS:
        return {"type": _SCALARS[hint]}, False
    if origin is Literal:
        kinds = {_SCALARS.get(type(a)) for a in args}
        if None in kinds or len(kinds) != 1:
            raise TypeError(f"{where}: Literal values must share one of str/int/float/bool")
        return {"type": kinds.pop(), "enum": list(args)}, False
    if hint is list or origin is list:
        items = json_schema(args[0], where)[0] if args else {}
        return {"type": "array", "items": items}, False
    if hint is dict or origin is dict:
        if args and args[0] is not str:
            raise TypeError(f"{where}: a dict's keys must be str (JSON objects)")
        schema: dict[str, Any] = {"type": "object"}
        if args:
            schema["additionalProperties"] = json_schema(args[1], where)[0]
        return schema, False
    raise TypeError(
        f"{where}: {hint!r} has no JSON schema (use str, int, float, bool, "
        "list[...], dict[str, ...], Literal[...] or Optional[...])"
    )


def parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """The first paragraph (joined into one line), and the `Args:` section's descriptions
    (Google style: `name (type): text`, continued on more-indented lines)."""
    paragraphs = doc.strip().split("\n\n")
    description = " ".join(paragraphs[0].split()) if paragraphs[0] else ""
    args: dict[str, str] = {}
    lines = doc.splitlines()
    header = next((i for i, line in enumerate(lines) if _ARGS_HEADER.match(line)), None)
    if header is None:
        return description, args
    indent, current = None, None
    for line in lines[header + 1 :]:
        if not line.strip():
            if current is not None:
                break
            continue
        depth = len(line) - len(line.lstrip())
        if indent is None:
            indent = depth
        if depth < indent:
            break
        match = _ARG_LINE.match(line)
        if depth == indent and match:
            current = match.group(1).lstrip("*")
            args[current] = match.group(3).strip()
        elif current is not None:
            args[current] = f"{args[current]} {line.strip()}".strip()
    return description, args
