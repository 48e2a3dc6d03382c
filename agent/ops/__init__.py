"""Running it: Prometheus metrics and per-turn logs (metrics), memory trimming (memory_trim), and
the livekit-server binary for dev and tests (livekit_server)."""
