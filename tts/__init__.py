"""Text-to-speech for voxroom: Piper synthesis and the text chunkers that feed it."""
