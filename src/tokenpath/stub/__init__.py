"""The emitter: an OpenAI-compatible SSE model stub with exact pacing and an audit log of every write."""
