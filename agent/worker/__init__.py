"""`voxroom agent`: the worker on livekit-agents (worker), the re-dispatch of rooms whose agent
died (redispatch), and the providers' reachability checks at start (provider_checks)."""
