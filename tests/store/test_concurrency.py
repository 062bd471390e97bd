"""Done-when of issue #22: 4 processes x 50 agents x 20 turns on one SQLite file: every turn
and every state is stored, and no caller ever sees SQLite's `database is locked`. The file
does not exist beforehand: the four processes create it (schema and WAL) at the same time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import msgspec

from gen_agent.store import SQLiteStore

CHILD = Path(__file__).with_name("_child.py")
PROCESSES, AGENTS, TURNS = 4, 50, 20


def test_four_processes_share_one_file_and_lose_nothing(tmp_path: Path) -> None:
    db = tmp_path / "shared.db"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    prompts = [f"turn {i}" for i in range(TURNS)]
    children = [
        subprocess.Popen(
            [sys.executable, str(CHILD), json.dumps({
                "db": str(db), "key": f"p{n}", "backend": "mock", "prompts": prompts,
                "agents": AGENTS})],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        for n in range(PROCESSES)
    ]
    reports = []
    for child in children:
        out, err = child.communicate(timeout=240)
        assert child.returncode == 0, err[-2000:]
        assert "database is locked" not in out + err
        reports.append(json.loads(out.splitlines()[0]))
    for report in reports:
        assert report["failures"] == []
        assert report["store_errors"] == {}
        assert set(report["states"].values()) == {TURNS}
    store = SQLiteStore(db)
    keys = store.list_keys()
    assert len(keys) == PROCESSES * AGENTS
    for key in keys:
        record = store.load(key)
        assert record is not None
        assert (record.totals.turns, record.in_flight, record.lease) == (TURNS, None, None)
        assert record.state is not None
        assert msgspec.msgpack.decode(record.state)["turns"] == TURNS
    store.close()
