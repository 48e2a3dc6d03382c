"""Desktop loopback bridge: publishes the computer's output audio into a LiveKit room."""
