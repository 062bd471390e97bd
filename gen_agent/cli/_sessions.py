"""`gen-agent sessions`: list, show and delete the durable sessions of a `SQLiteStore` file.

- `gen-agent sessions list --db FILE`: one row per key (backend, turns, tokens, cost, owner,
  whether a turn is in flight or was interrupted, last update).
- `gen-agent sessions show --db FILE KEY`: one session's record. The conversation and the
  agent state are summarized (message count, ids, byte sizes) and the last failure shown by
  its kinds and type names, without any text, exception message or traceback, unless
  `--payload` is given.
- `gen-agent sessions delete --db FILE KEY...`: remove sessions; a session owned by a live
  agent is refused unless `--force`.

`--db` defaults to the `GEN_AGENT_STORE` environment variable. `--json` prints JSON instead of
tables. Exit codes: 0 done, 1 a key was not found (or refused), 2 bad input (no such file, an
empty file, not a SQLite file, a SQLite file of something else, a newer schema).
"""

from __future__ import annotations

import datetime
import functools
import json
import os
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

import msgspec
import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from gen_agent._portable import PortableError, PortableObject, from_portable
from gen_agent._reasons import describe_reason
from gen_agent.cli._support import EXIT_FAILED, CliError
from gen_agent.cli._terminal import strip_controls
from gen_agent.store import (
    InFlightTurn,
    InterruptedTurn,
    LeaseHeld,
    SessionRecord,
    SQLiteStore,
    StoreError,
    TurnOutcome,
)
from gen_agent.store._lease import holder_alive

__all__ = ["describe_record", "sessions_app"]

sessions_app = typer.Typer(add_completion=False, no_args_is_help=True,
                           help="List, show and delete stored agent sessions (SQLiteStore).")

DbOpt = Annotated[str | None, typer.Option(
    "--db", envvar="GEN_AGENT_STORE", show_default=False,
    help="The SQLiteStore file (default: $GEN_AGENT_STORE).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
_F = TypeVar("_F", bound=Callable[..., Any])


def _guarded(command: _F) -> _F:
    """A `CliError` becomes `error: ...` on stderr and its exit code (no traceback)."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except CliError as exc:
            Console(stderr=True, highlight=False).print(
                f"[bold red]error:[/] {escape(strip_controls(exc.message))}", soft_wrap=True)
            raise typer.Exit(exc.exit_code) from None

    return wrapper  # type: ignore[return-value]


_SQLITE_HEADER = b"SQLite format 3\x00"  # the first 16 bytes of every SQLite 3 file


def _open(db: str | None) -> SQLiteStore:
    """The store at `db`, checked first to be one: a look never writes to another file."""
    if not db:
        raise CliError("give the session store file with --db (or set GEN_AGENT_STORE)")
    path = os.path.expanduser(db)
    if not os.path.isfile(path):
        raise CliError(f"no session store at {db!r}" + (
            " (it is a directory)" if os.path.isdir(path) else ""))
    try:
        with open(path, "rb") as handle:
            header = handle.read(len(_SQLITE_HEADER))
    except OSError as exc:
        raise CliError(f"cannot read the session store {db!r}: {exc.strerror or exc}") from None
    if not header:
        raise CliError(f"{db!r} is an empty file, not a session store (a SQLite file that "
                       "SQLiteStore wrote)")
    if header != _SQLITE_HEADER:
        raise CliError(f"{db!r} is not a session store: it is not a SQLite database file")
    try:
        return SQLiteStore(db, busy_timeout=10.0)
    except StoreError as exc:
        raise CliError(f"cannot open the session store: {exc}") from None


def _time(value: float) -> str:
    if not value:
        return "-"
    return datetime.datetime.fromtimestamp(value).isoformat(sep=" ", timespec="seconds")


def _owner(record: SessionRecord, ttl_s: float) -> dict[str, Any] | None:
    lease = record.lease
    if lease is None:
        return None
    alive = holder_alive(lease, ttl_s, datetime.datetime.now().timestamp())
    return {"pid": lease.pid, "host": lease.host, "alive": alive,
            "heartbeat_at": lease.heartbeat_at}


def _conversation_summary(conversation: Any) -> Any:
    """Ids and counts, never message text."""
    if not isinstance(conversation, dict):
        return None if conversation is None else type(conversation).__name__
    summary: dict[str, Any] = {}
    for name, value in conversation.items():
        if isinstance(value, list):
            summary[name] = f"{len(value)} items"
        elif isinstance(value, str | int | float | bool) or value is None:
            summary[name] = value  # session ids, response ids, turn counts
        else:
            summary[name] = type(value).__name__
    return summary


_PAYLOAD_FIELDS = ("prompt", "response")
_CALL_PAYLOAD = ("input", "result")


def _turn(turn: InFlightTurn | InterruptedTurn | None, payload: bool) -> Any:
    """An in-flight or interrupted turn; without `payload`, its prompt, reply, tool inputs
    and results are replaced by their sizes (characters) and the usage kept."""
    view = msgspec.to_builtins(turn)
    if view is None or payload:
        return view
    for name in _PAYLOAD_FIELDS:
        if view.get(name) is not None:
            view[name] = f"<{len(view[name])} characters>"
    for group in ("finished", "in_doubt"):
        for call in view.get(group, ()):
            for name in _CALL_PAYLOAD:
                if call.get(name) is not None:
                    call[name] = "<hidden: --payload shows it>"
    return view


def _outcome(outcome: TurnOutcome | None, payload: bool) -> Any:
    """The last turn's outcome; its failure reason as `describe_reason` renders it (kinds and
    type names, no exception message, provider message or traceback) unless `payload`."""
    view = msgspec.to_builtins(outcome)
    if outcome is not None and outcome.reason is not None and not payload:
        view["reason"] = describe_reason(from_portable(_revived(outcome.reason)))
    return view


_RECORDS: dict[str, type[msgspec.Struct]] = {"error": PortableError, "object": PortableObject}


def _revived(value: Any) -> Any:
    """A stored reason (read back as plain data: arrays as lists, records as maps tagged
    `"type"`) in its portable form again: tuples, `PortableError`s, `PortableObject`s."""
    if isinstance(value, list):
        return tuple(_revived(item) for item in value)
    if isinstance(value, dict):
        record = _RECORDS.get(str(value.get("type")))
        if record is not None:
            try:
                return msgspec.convert(value, record)
            except msgspec.ValidationError:
                pass  # a map that only looks like a record: kept as data
        return {key: _revived(item) for key, item in value.items()}
    return value


def describe_record(record: SessionRecord, *, payload: bool = False,
                    lease_ttl_s: float = 60.0) -> dict[str, Any]:
    """A JSON-ready view of `record`: without conversation or state text unless `payload`.

    Args:
        record: the stored record.
        payload: include the conversation data and the decoded state.
        lease_ttl_s: the store's lease TTL (seconds), to tell whether an owner on another
            host is alive.

    Returns:
        A dict with `key`, `backend`, `totals`, `owner`, `in_flight`, `interrupted`,
        `last_outcome` (its reason described, or stored in full with `payload`; the
        turns' prompts, replies, tool inputs and results likewise only with `payload`),
        `created_at`, `updated_at`, `conversation` (a summary, or the data itself with
        `payload`) and `state_bytes` (plus `state`, decoded, with `payload`).
    """
    view: dict[str, Any] = {
        "key": record.key,
        "backend": record.backend,
        "totals": msgspec.to_builtins(record.totals),
        "owner": _owner(record, lease_ttl_s),
        "in_flight": _turn(record.in_flight, payload),
        "interrupted": _turn(record.interrupted, payload),
        "last_outcome": _outcome(record.last_outcome, payload),
        "created_at": record.created_at,
        "updated_at": record.updated_at,
        "conversation": (record.conversation if payload
                         else _conversation_summary(record.conversation)),
        "state_bytes": None if record.state is None else len(record.state),
    }
    if payload and record.state is not None:
        try:
            view["state"] = msgspec.msgpack.decode(record.state)
        except msgspec.DecodeError:
            view["state"] = f"<{len(record.state)} bytes, not MessagePack>"
    return view


def _load_all(store: SQLiteStore) -> list[SessionRecord | str]:
    found: list[SessionRecord | str] = []
    for key in store.list_keys():
        try:
            record = store.load(key)
        except StoreError:
            found.append(key)  # corrupt: listed by key only
            continue
        if record is not None:
            found.append(record)
    return found


@sessions_app.command("list")
@_guarded
def list_sessions(db: DbOpt = None, json_out: JsonOpt = False) -> None:
    """List every stored session."""
    store = _open(db)
    try:
        records = _load_all(store)
    finally:
        store.close()
    if json_out:
        for item in records:
            view = ({"key": item, "corrupt": True} if isinstance(item, str)
                    else describe_record(item, lease_ttl_s=store.lease_ttl_s))
            typer.echo(json.dumps(view, default=str))
        return
    table = Table("key", "backend", "turns", "tokens in/out", "cost $", "owner", "turn",
                  "updated")
    for item in records:
        if isinstance(item, str):
            table.add_row(Text(strip_controls(item)), "[red]corrupt[/]", "", "", "", "", "", "")
            continue
        usage = item.totals.usage
        owner = _owner(item, store.lease_ttl_s)
        owner_text = "-" if owner is None else (
            f"pid {owner['pid']}@{owner['host']}" + ("" if owner["alive"] else " (dead)"))
        turn = ("running" if item.in_flight is not None
                else "interrupted" if item.interrupted is not None else "-")
        # Text cells (no markup) without escape sequences: a store file may come from anywhere.
        table.add_row(Text(strip_controls(item.key)), Text(strip_controls(item.backend or "-")),
                      str(item.totals.turns),
                      f"{usage.get('input_tokens', 0)}/{usage.get('output_tokens', 0)}",
                      f"{item.totals.cost_usd:.4f}", Text(strip_controls(owner_text)), turn,
                      _time(item.updated_at))
    Console(highlight=False).print(table)


@sessions_app.command("show")
@_guarded
def show_session(
    key: Annotated[str, typer.Argument(help="The session key.")],
    db: DbOpt = None,
    payload: Annotated[bool, typer.Option(
        "--payload", help="Include the conversation and the agent state themselves.")] = False,
) -> None:
    """Show one session (JSON), without its conversation text unless --payload."""
    store = _open(db)
    try:
        try:
            record = store.load(key)
        except StoreError as exc:
            raise CliError(str(exc), EXIT_FAILED) from None
    finally:
        store.close()
    if record is None:
        raise CliError(f"no session {key!r}", EXIT_FAILED)
    view = describe_record(record, payload=payload, lease_ttl_s=store.lease_ttl_s)
    typer.echo(json.dumps(view, indent=2, default=str, ensure_ascii=False))


@sessions_app.command("delete")
@_guarded
def delete_sessions(
    keys: Annotated[list[str], typer.Argument(help="The session keys.")],
    db: DbOpt = None,
    force: Annotated[bool, typer.Option(
        "--force", help="Delete even a session a live agent owns.")] = False,
) -> None:
    """Delete sessions (refused for one a live agent owns, unless --force)."""
    store = _open(db)
    missing: list[str] = []
    try:
        for key in keys:
            try:
                deleted = store.delete(key, force=force)
            except LeaseHeld as exc:
                raise CliError(f"{exc}; stop it first or use --force", EXIT_FAILED) from None
            if deleted:
                typer.echo(f"deleted {key}")
            else:
                missing.append(key)
    finally:
        store.close()
    if missing:
        raise CliError(f"no session {', '.join(map(repr, missing))}", EXIT_FAILED)
