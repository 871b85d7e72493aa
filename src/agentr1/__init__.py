"""agentr1: end-to-end RL for tool-using LLM agents (Agent-R1), as a reproducible pipeline."""

__version__ = "0.1.0"
