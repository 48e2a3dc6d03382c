"""Running it: Prometheus metrics and per-turn logs (metrics), memory trimming (memory_trim),
stopping child processes (processes), and the livekit-server binary for dev and tests
(livekit_server)."""
