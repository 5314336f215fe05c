"""tokenpath: measure what a path does to an LLM token stream."""

__version__ = "0.1.0"
