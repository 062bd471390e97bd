"""The CLI-process wing of the bundled backends: subprocess plumbing, JSONL, Claude and Codex
protocols (private; the public modules are `gen_agent.backends.claude`, `.codex`, `.warm`)."""
