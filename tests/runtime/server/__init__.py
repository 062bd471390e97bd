"""Tests of the agent core driven through the public API on the mock backend (their shared
helpers are in tests/_agents.py)."""
