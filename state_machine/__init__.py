"""The conversation state machine: pure code, driven by events and an injected clock."""
