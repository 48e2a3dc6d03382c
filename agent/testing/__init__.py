"""Test doubles that the product's own bench, load test and `--llm script:` use, named as doubles:
the scripted LLM, its OpenAI-compatible server, and remote-like STT/LLM/TTS servers."""
