"""Audio in and out of the turn engine: frame repair (frames), voice activity (vad), and where the
agent's voice goes (sinks)."""
