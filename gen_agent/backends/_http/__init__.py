"""The HTTP-SDK wing of the bundled backends: SSE decoding, the shared SDK session and the tool
loop (private; the public modules are `gen_agent.backends.anthropic` and `.openai`)."""
