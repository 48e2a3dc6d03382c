"""The voice agent: the turn engine (`engine.py`) that runs the pure state machine's actions
against the engines and the shared pipeline, and each turn's latencies (`turn_metrics.py`)."""
