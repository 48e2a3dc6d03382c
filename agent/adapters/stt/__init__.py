"""Speech to text: the bundled Whisper (whisper), Deepgram (deepgram), and the guard that keeps a
failing stream from raising (guard)."""
