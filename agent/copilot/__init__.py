"""The interview copilot: its engine (engine) and its events (events), its room (room), the
read-ahead of questions (prefill), spoken answers (voice), the question detector, and the
documents' context index (context/)."""
