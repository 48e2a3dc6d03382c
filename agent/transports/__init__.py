"""How clients reach the agent: a LiveKit room (room_session, its input and output in room_io,
ffi_router), direct WebRTC (direct), join tokens (tokens) and the web page's endpoints
(web_server)."""
