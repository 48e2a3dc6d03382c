"""Every engine adapter in one home, behind the interfaces in `agent/engines.py`: speech to
text (`stt/`), chat models and the question read into their cache (`llm/`), the end-of-turn
models (`turn_detector.py`), the sentence embedder (`embedder.py`), the tools the LLM may
call (`tools/`), and `providers.py`, which makes each from the settings. Speech synthesis
stays in the top-level `tts/` package."""
