"""What outlives a session: the turn store (transcripts, SQLite or PostgreSQL), the room's recent
turns for a new agent (room_memory_sqlite, shared_state in Redis), the leases (leases,
shared_state) and the conversation log that writes them (conversation_log)."""
