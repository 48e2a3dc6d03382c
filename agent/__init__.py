"""voxroom agent: the worker, the engine adapters (STT, LLM, VAD) and the command line."""
