"""sparktui: a terminal console for vLLM on multi-node Ray clusters."""

__version__ = "0.1.0"
