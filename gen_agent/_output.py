"""Structured output: ask for a typed answer, get back a validated value in `Response.parsed`.

`ask(name, prompt, output=T)` (or `RequestOptions(output=T)`, or the agent-wide `output`
start option) asks for a reply of type `T`, any type msgspec can validate: a `Struct`, a
dataclass, a `TypedDict`, `list[...]`, `dict[str, int]`... The JSON schema sent to the
provider is `schema_of(T)` (from `msgspec.json.schema`), and each bundled backend uses its
provider's own mechanism:

| backend | how the schema is sent | what is validated |
|---|---|---|
| `AnthropicAPI` | `output_config.format` (`{"type": "json_schema", "schema"}`) | the reply text |
| `OpenAIResponses` | `text.format` (`json_schema`, `name`, `schema`, not strict) | the reply text |
| `ClaudeCLI` | `--json-schema` (see below) | the result's `structured_output`, else its text |
| `CodexCLI` | `--output-schema FILE` / app-server `outputSchema` (strict) | the final message |
| `MockBackend` | (the script's text is the reply) | the reply text |

`CodexCLI` sends `strict_schema_of(T)`, and the CLI asks the model for OpenAI's strict mode:
`T` must have an object at the root and no mapping types (see `strict_schema_of`).

`ClaudeCLI` passes the schema in both modes. The CLI sets its output schema only when a
process starts (`--json-schema`; its stream-json `initialize` request takes a `jsonSchema`
too, but only the first `initialize` counts; no per-message setting, checked on 2.1.197), so
a warm process runs with one schema: a turn asking for another type (or for none while the
process has one) closes it and starts one resuming the same session. With one type per agent
(the `output` start option) that never happens; each change costs one process start
(measured: ~0.1 s to close plus a cold start, 3.5-5 s on a loaded 2-core machine, against
~0.2 s for a turn on the live process).

A backend reads the request's type as `context.options.output` and the schema with
`schema_of`. After a successful turn the runtime validates (`parse_output`): the result's
`structured_output` value when the backend reports one, else the reply text as JSON (one
surrounding Markdown code fence is tolerated). A value that does not validate fails the turn
with the reason `("invalid_output", InvalidOutput(...))`: its `message` is msgspec's
validation message (hand it back to the model in a caller-owned retry), its `response` the
turn's `Response` (raw `text`, `messages`, `usage`; `parsed` None). The conversation keeps
the reply, so a retry continues from it.

Mirrors: nothing in the Elixir original; the field's structured outputs (AgentOS's
`GenerateTextResult.parsed`, the agent SDKs' `structured_output`).
"""

from __future__ import annotations

import functools
import re
from typing import Any, Final

import msgspec

from gen_agent._response import Response

__all__ = [
    "InvalidOutput",
    "check_output_type",
    "parse_output",
    "schema_name",
    "schema_of",
    "strict_schema_of",
]

_FENCE: Final = re.compile(r"^\s*```[A-Za-z0-9_-]*\s*\n(.*?)\n?```\s*$", re.DOTALL)


class InvalidOutput(msgspec.Struct, frozen=True, kw_only=True):
    """Why a structured reply was refused: the second element of `("invalid_output", ...)`.

    Fields:
        message: the validation (or JSON decoding) message from msgspec, e.g.
            `"Expected `int`, got `str` - at `$.count`"`.
        response: the turn's `Response`: the raw `text`, `messages`, `usage`, `cost_usd`;
            `parsed` is None.
    """

    message: str
    response: Response

    def __describe__(self) -> str:
        """How `describe_reason` (and so `str(TurnError)`) shows it: the validation message
        with quoted values elided (msgspec quotes reply values, e.g. an invalid enum value;
        types, field names and the JSON path stay), e.g. ``InvalidOutput(Expected `float`,
        got `str` - at `$.confidence`)``."""
        return f"InvalidOutput({_QUOTED.sub(_elide, self.message)})"


_QUOTED = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")


def _elide(match: re.Match[str]) -> str:
    return match.group(0)[0] + "…" + match.group(0)[0]


def check_output_type(output: Any, fn: str) -> Any:
    """`output` if msgspec can build a JSON schema for it (None passes); else a TypeError.

    Args:
        output: a type (`Struct`, dataclass, TypedDict, `list[int]`...) or None.
        fn: the public function named in the error.

    Raises:
        TypeError: msgspec cannot make a schema of `output` (the message names `fn`).
    """
    if output is None:
        return None
    try:
        schema_of(output)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{fn}: output must be a type msgspec can validate, got "
                        f"{output!r} ({exc})") from None
    return output


@functools.lru_cache(maxsize=256)
def _schema(output: Any) -> dict[str, Any]:
    schema = msgspec.json.schema(output)
    ref = schema.get("$ref")
    defs = schema.get("$defs")
    if isinstance(ref, str) and isinstance(defs, dict) and ref.startswith("#/$defs/"):
        # Providers want an object at the root: inline the referenced definition there.
        root = dict(defs[ref.removeprefix("#/$defs/")])
        rest = {k: v for k, v in defs.items() if k != ref.removeprefix("#/$defs/")}
        if _refers(root, ref) or rest:
            root["$defs"] = defs
        return root
    return schema


def _refers(value: Any, ref: str) -> bool:
    if isinstance(value, dict):
        return value.get("$ref") == ref or any(_refers(v, ref) for v in value.values())
    if isinstance(value, list):
        return any(_refers(v, ref) for v in value)
    return False


def schema_of(output: Any) -> dict[str, Any]:
    """The JSON schema of `output` as sent to providers (a new dict each call).

    Args:
        output: any type msgspec can validate.

    Returns:
        `msgspec.json.schema(output)`, with a root `$ref` to a definition replaced by that
        definition (providers want an object at the root; `$defs` stay when still referred
        to).

    Raises:
        TypeError: msgspec cannot make a schema of it.
    """
    return msgspec.json.decode(msgspec.json.encode(_schema(output)))


# The keywords whose values are schemas (a mapping of them, a list of them, or one).
_SCHEMA_MAPS: Final = ("properties", "$defs")
_SCHEMA_LISTS: Final = ("anyOf", "allOf", "oneOf", "prefixItems")
_SCHEMA_ONE: Final = ("items", "additionalProperties", "not")


def strict_schema_of(output: Any) -> dict[str, Any]:
    """`schema_of(output)` adapted to OpenAI's strict structured outputs (`"strict": true`),
    which the Codex CLI always asks for (`text.format` `{"type": "json_schema", "strict":
    true, "name": "codex_output_schema", "schema"}`, seen on the loopback server's log).

    Strict mode accepts a schema only when every object lists all of its properties in
    `required` and sets `"additionalProperties": false`; this adds both to every object
    schema (the root, nested objects, `$defs`, array items, union members) and drops
    `default` values (a field with a default becomes required: the model always fills it,
    and msgspec accepts the value). What it cannot adapt, and the provider then refuses: a
    root that is not an object (`list[...]`, a union: wrap it in a `Struct`), a mapping type
    (`dict[str, int]`: its `additionalProperties` is a schema, not false), and keywords the
    model does not support in strict mode. Mirrors the OpenAI Structured Outputs guide
    ("Supported schemas").

    Args:
        output: any type msgspec can validate.

    Returns:
        A new dict (the input schema is not changed).

    Raises:
        TypeError: msgspec cannot make a schema of it.
    """
    return _strict(schema_of(output))


def _strict(schema: Any) -> Any:
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    for key in _SCHEMA_MAPS:
        if isinstance(out.get(key), dict):
            out[key] = {name: _strict(sub) for name, sub in out[key].items()}
    for key in _SCHEMA_LISTS:
        if isinstance(out.get(key), list):
            out[key] = [_strict(sub) for sub in out[key]]
    for key in _SCHEMA_ONE:
        if isinstance(out.get(key), dict):
            out[key] = _strict(out[key])
    if out.get("type") == "object":
        out.setdefault("additionalProperties", False)
        if isinstance(out.get("properties"), dict):
            out["required"] = list(out["properties"])
    out.pop("default", None)
    return out


def schema_name(output: Any) -> str:
    """A name for the schema (`[A-Za-z0-9_-]`, at most 64 chars): the type's name, else
    `"output"`."""
    name = getattr(output, "__name__", None) or "output"
    return re.sub(r"[^A-Za-z0-9_-]", "_", str(name))[:64] or "output"


def parse_output(output: Any, response: Response) -> Any:
    """Validate a turn's structured reply as `output`.

    Args:
        output: the requested type.
        response: the turn's `Response`.

    Returns:
        The validated value: the terminal's `structured_output` converted to `output` when
        the backend reports one, else `response.text` decoded as JSON of type `output` (one
        surrounding Markdown code fence is stripped first).

    Raises:
        msgspec.ValidationError: the value does not match `output`.
        msgspec.DecodeError: the text is not JSON.
    """
    terminal = response.terminal
    data = terminal.data if terminal is not None else {}
    if data.get("structured_output") is not None:
        return msgspec.convert(data["structured_output"], output, strict=True)
    text = response.text
    fenced = _FENCE.match(text)
    if fenced is not None:
        text = fenced.group(1)
    return msgspec.json.decode(text, type=output)
