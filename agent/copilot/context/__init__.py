"""The candidate's documents as context: the MiniLM embedder (embedder) and the index of their
pieces (index)."""
