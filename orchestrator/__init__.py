"""orchestrator: llama.cpp orchestration with MTP speculative decoding."""

__version__ = "0.1.0"
