"""Tools the agent can call: one registry fed by MCP servers, Python functions and built-ins,
filtered per profile into the toolbox a session offers its LLM."""
