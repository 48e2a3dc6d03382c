"""How clients reach the agent: a LiveKit room (room_session, ffi_router), direct WebRTC (direct),
join tokens (tokens) and the web page's endpoints (web_server)."""
