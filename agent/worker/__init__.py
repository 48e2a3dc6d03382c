"""`voxroom agent`: the worker on livekit-agents (worker: its wiring), what it is made of
(load: its load as LiveKit sees it; process_engines and tool_registry: the engines a process
shares; job, served, profiles, job_llm: one job and what it gets; drain: the stop), the
re-dispatch of rooms whose agent died (redispatch), and the providers' reachability checks at
start (provider_checks)."""
