"""Language models: the OpenAI-compatible chat client (openai_chat), the bundled llama.cpp server
(llama_server), the fallback race (fallback), the conversation's history (history), the tool
calls in a streamed reply (tool_calls) and the question read into the cache while it is spoken
(prefill)."""
