"""The voice agent's pipeline: the turn engine (engine) around the pure state machine, end-of-turn
models (turn_detector), the reply (reply: chunker -> TTS -> playout), the per-turn latencies
(turn_metrics) and the events the engines report (events)."""
