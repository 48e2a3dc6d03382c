"""Language models: the OpenAI-compatible chat client (openai_chat), the bundled llama.cpp server
(llama_server), the fallback race (fallback), and the conversation's history (history)."""
