"""The Pool-over-two-nodes recipe (docs/examples/distributed/ray_pool.py), on the session's
Ray."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from examples._loader import load_example

from .conftest import gray  # noqa: F401 - Ray set up first


def test_every_task_is_answered_once_when_a_node_dies(cluster) -> None:
    recipe = load_example("distributed/ray_pool")
    counts = recipe.run(namespace=cluster.namespace)
    assert counts["ok"] + counts["worker_down"] == 40
    assert counts["ok"] >= 36 and counts["worker_down"] <= 2  # b held at most 2 in flight
