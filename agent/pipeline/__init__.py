"""The machinery the voice agent and the copilot share: the listening front end
(`listener.py`), the reply pipeline (`reply.py`, `tool_round.py`) and the playout."""
