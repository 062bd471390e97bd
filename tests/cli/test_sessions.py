"""`gen-agent sessions list/show/delete` on a SQLiteStore file (issue #22)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import msgspec
import pytest
from typer.testing import CliRunner

from gen_agent._portable import to_portable
from gen_agent.backend import BackendError
from gen_agent.cli._app import app
from gen_agent.store import SCHEMA_VERSION, InFlightTurn, SQLiteStore, Totals, TurnOutcome

runner = CliRunner()
SECRET = "the user's secret question"


def invoke(*args: str) -> Any:
    return runner.invoke(app, ["sessions", *args], env={"COLUMNS": "200"})


@pytest.fixture
def db(tmp_path: Path) -> str:
    path = tmp_path / "sessions.db"
    store = SQLiteStore(path)
    lease = store.acquire("chat-1")
    store.update(lease, backend="AnthropicAPI",
                 conversation={"session_id": "anthropic-1", "turns": 1,
                               "history": [{"role": "user", "content": SECRET},
                                           {"role": "assistant", "content": "an answer"}]},
                 state=msgspec.msgpack.encode({"notes": SECRET}),
                 totals=Totals(turns=1, usage={"input_tokens": 12, "output_tokens": 3},
                               cost_usd=0.5))
    store.release(lease)
    idle = store.acquire("worker-2")
    store.update(idle, in_flight=InFlightTurn(ref="r", origin="ask", attempt=1,
                                              started_at=1.0, pid=1))
    store.close()  # the lease of worker-2 stays: this process is its live owner
    return str(path)


def test_list_shows_every_session(db: str) -> None:
    result = invoke("list", "--db", db)
    assert result.exit_code == 0, result.output
    assert "chat-1" in result.output and "AnthropicAPI" in result.output
    assert "12/3" in result.output and "running" in result.output
    assert SECRET not in result.output
    rows = [json.loads(line) for line in invoke("list", "--db", db, "--json").output.splitlines()]
    assert [row["key"] for row in rows] == ["chat-1", "worker-2"]
    assert rows[1]["owner"]["alive"] is True


def test_show_hides_the_payload_unless_asked(db: str) -> None:
    result = invoke("show", "--db", db, "chat-1")
    assert result.exit_code == 0, result.output
    view = json.loads(result.output)
    assert view["conversation"] == {"session_id": "anthropic-1", "turns": 1,
                                    "history": "2 items"}
    assert view["totals"] == {"turns": 1, "usage": {"input_tokens": 12, "output_tokens": 3},
                              "cost_usd": 0.5, "interrupted_turns": 0}
    assert SECRET not in result.output
    full = json.loads(invoke("show", "--db", db, "chat-1", "--payload").output)
    assert full["conversation"]["history"][0]["content"] == SECRET
    assert full["state"] == {"notes": SECRET}


@pytest.mark.parametrize(("reason", "shown"), [
    (("task_crashed", ValueError(SECRET)), "task_crashed: ValueError"),
    (BackendError.new("anthropic", "invalid_request", {"error": SECRET}, message=SECRET)
     .with_diagnostics(partial_text=SECRET), "invalid_request (provider=anthropic)"),
    (RuntimeError(SECRET), "RuntimeError"),
])
def test_show_hides_a_stored_failure_message_unless_asked(
    db: str, reason: Any, shown: str,
) -> None:
    store = SQLiteStore(db)
    lease = store.acquire("failed-3")
    store.update(lease, last_outcome=TurnOutcome(ref="r", ok=False, ended_at=2.0,
                                                 reason=to_portable(reason)))
    store.release(lease)
    store.close()

    result = invoke("show", "--db", db, "failed-3")

    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["last_outcome"] == {"ref": "r", "ok": False,
                                                         "reason": shown, "ended_at": 2.0}
    assert SECRET not in result.output
    listed = invoke("list", "--db", db, "--json").output
    assert "failed-3" in listed and SECRET not in listed
    assert SECRET in invoke("show", "--db", db, "failed-3", "--payload").output

def test_delete_refuses_a_live_owner_without_force(db: str) -> None:
    refused = invoke("delete", "--db", db, "worker-2")
    assert refused.exit_code == 1 and "--force" in refused.output
    assert invoke("delete", "--db", db, "worker-2", "--force").exit_code == 0
    assert invoke("delete", "--db", db, "chat-1").output == "deleted chat-1\n"
    missing = invoke("delete", "--db", db, "chat-1")
    assert missing.exit_code == 1 and "no session 'chat-1'" in missing.output
    assert SQLiteStore(db).list_keys() == []


def test_bad_input_is_one_error_line(db: str, tmp_path: Path) -> None:
    assert invoke("show", "--db", db, "nope").exit_code == 1
    missing = invoke("list", "--db", str(tmp_path / "none.db"))
    assert missing.exit_code == 2 and "no session store" in missing.output
    assert not (tmp_path / "none.db").exists()  # never created by a look
    assert invoke("list").exit_code == 2
    conn = sqlite3.connect(db)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    newer = invoke("list", "--db", db)
    assert newer.exit_code == 2 and "newer" in newer.output


def test_a_corrupt_session_is_listed_and_shown_as_an_error(db: str) -> None:
    conn = sqlite3.connect(db)
    conn.execute("UPDATE sessions SET totals = ? WHERE key = 'chat-1'", (b"\xc1",))
    conn.commit()
    conn.close()
    rows = [json.loads(line) for line in invoke("list", "--db", db, "--json").output.splitlines()]
    assert rows[0] == {"key": "chat-1", "corrupt": True} and rows[1]["key"] == "worker-2"
    shown = invoke("show", "--db", db, "chat-1")
    assert shown.exit_code == 1 and "corrupt" in shown.output and "'totals'" in shown.output
    assert invoke("delete", "--db", db, "chat-1").exit_code == 0  # the way out


def test_a_damaged_store_file_says_what_is_wrong(tmp_path: Path) -> None:
    damaged = tmp_path / "damaged.db"
    conn = sqlite3.connect(damaged)
    conn.execute("CREATE TABLE t (x)")
    conn.commit()
    conn.close()
    data = bytearray(damaged.read_bytes())
    data[100:] = b"\xff" * (len(data) - 100)  # a valid header over a garbled first page
    damaged.write_bytes(bytes(data))
    result = invoke("list", "--db", str(damaged))
    assert result.exit_code == 2
    assert result.output == (f"error: cannot open the session store: session store "
                             f"'{damaged}': DatabaseError (SQLITE_CORRUPT: the file is damaged: "
                             "its database image is malformed)\n")
