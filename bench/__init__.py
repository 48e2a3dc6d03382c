"""voxroom's benchmarks and load test, installed with it: `voxroom bench` (the spoken corpora
through the agent, simulate or through LiveKit, and the single-engine benchmarks as its
subcommands) and `voxroom loadtest`. The corpora synthesize their speech (bench/speech.py),
so nothing here needs a checkout of the repository."""
