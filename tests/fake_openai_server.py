"""The scripted LLM test double as an OpenAI-compatible server, under the name the tests use;
it lives in agent/testing/scripted_llm_server.py because `voxroom bench` serves it too."""

from agent.testing.scripted_llm_server import scripted_llm_server as fake_openai_server

__all__ = ["fake_openai_server"]
