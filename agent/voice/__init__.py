"""The voice agent's pipeline: the turn engine (engine) around the pure state machine, end-of-turn
models (turn_detector), the reply (reply: chunker -> TTS -> playout) and the per-turn latencies
(turn_metrics)."""
