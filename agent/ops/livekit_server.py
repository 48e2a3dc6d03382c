"""Find (or build) the `livekit-server` binary and run it on this machine for dev and tests.

`LiveKitServer` starts one node with its own free ports, so several can run at once; with a
shared Redis they form one multi-node deployment. `python -m agent.ops.livekit_server --ensure`
prints the binary's path, building it first when needed (used by `make livekit-server`).
"""

from __future__ import annotations

import argparse
import fcntl
import ipaddress
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import weakref
from pathlib import Path
from urllib.parse import urlparse

from agent.config import LiveKitSettings

LIVEKIT_VERSION = "v1.13.5"
GO_PACKAGE = f"github.com/livekit/livekit-server/cmd/server@{LIVEKIT_VERSION}"
BINARY_NAME = "livekit-server"
DEV_API_KEY = "devkey"
DEV_API_SECRET = "secret"

_INSTALL_HELP = (
    f"livekit-server {LIVEKIT_VERSION} is needed. Either put a livekit-server binary on PATH, "
    f"or install Go >= 1.26 and run `make livekit-server` (it runs "
    f"`GOBIN=<repo>/.cache/bin go install {GO_PACKAGE}` and renames `server` to `livekit-server`)."
)


class LiveKitServerMissing(RuntimeError):
    """No livekit-server binary, and none could be built; the message says how to get one."""


class LiveKitServerError(RuntimeError):
    """livekit-server did not start (the message ends with the tail of its log)."""


def cache_dir() -> Path:
    env = os.environ.get("VOXROOM_CACHE_DIR")
    return Path(env) if env else Path(__file__).resolve().parents[2] / ".cache"


def find_livekit_server(build: bool = True) -> Path:
    """`livekit-server` on PATH, else the cached build, else (when `build`) build it with Go."""
    on_path = shutil.which(BINARY_NAME)
    if on_path:
        return Path(on_path)
    cached = cache_dir() / "bin" / BINARY_NAME
    if cached.is_file():
        return cached
    if not build:
        raise LiveKitServerMissing(_INSTALL_HELP)
    return _build(cached)


def _build(target: Path) -> Path:
    go = shutil.which("go")
    if go is None:
        raise LiveKitServerMissing(f"Go is not installed. {_INSTALL_HELP}")
    target.parent.mkdir(parents=True, exist_ok=True)
    # Two processes (make and a test run, say) must not build into the same place at once.
    with open(target.parent / f".{BINARY_NAME}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if target.is_file():  # built by whoever held the lock before us
            return target
        with tempfile.TemporaryDirectory(dir=target.parent, prefix=".build-") as gobin:
            print(
                f"building livekit-server {LIVEKIT_VERSION} with Go (a few minutes, once)...",
                file=sys.stderr,
                flush=True,
            )
            started = time.monotonic()
            result = subprocess.run([go, "install", GO_PACKAGE], env={**os.environ, "GOBIN": gobin})
            if result.returncode != 0:
                raise LiveKitServerMissing(
                    f"`go install {GO_PACKAGE}` failed (exit {result.returncode}). {_INSTALL_HELP}"
                )
            # The Go command is named after its directory, cmd/server.
            os.replace(Path(gobin) / "server", target)
        print(f"built {target} in {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
    return target


def _free_ports(host: str, tcp: int, udp: int) -> tuple[list[int], list[int]]:
    """Distinct ports free right now; all sockets stay open until every port is chosen."""
    socks: list[socket.socket] = []
    try:
        for kind, count in ((socket.SOCK_STREAM, tcp), (socket.SOCK_DGRAM, udp)):
            for _ in range(count):
                s = socket.socket(socket.AF_INET, kind)
                socks.append(s)
                s.bind((host, 0))
        ports = [s.getsockname()[1] for s in socks]
        return ports[:tcp], ports[tcp:]
    finally:
        for s in socks:
            s.close()


def _redis_config(redis_url: str) -> dict[str, object]:
    """`redis://[user:password@]host:port[/db]` (or plain `host:port`) -> livekit `redis:` keys."""
    parsed = urlparse(redis_url if "://" in redis_url else f"redis://{redis_url}")
    if parsed.scheme not in ("redis", "rediss") or not parsed.hostname:
        raise ValueError(f"redis_url must look like redis://host:6379/0, got {redis_url!r}")
    conf: dict[str, object] = {"address": f"{parsed.hostname}:{parsed.port or 6379}"}
    if parsed.username:
        conf["username"] = parsed.username
    if parsed.password:
        conf["password"] = parsed.password
    if parsed.path.strip("/"):
        conf["db"] = int(parsed.path.strip("/"))
    if parsed.scheme == "rediss":
        conf["tls"] = {"enabled": True}
    return conf


class LiveKitServer:
    """One livekit-server node as a child process, keys devkey/secret.

    `port=None` picks free ports for HTTP/WebSocket, ICE/TCP and the single UDP mux port.
    Media is advertised on `node_ip` only; with the default loopback address nothing is
    reachable from outside this machine.
    """

    def __init__(
        self,
        port: int | None = None,
        *,
        redis_url: str | None = None,
        node_ip: str = "127.0.0.1",
        log_path: Path | None = None,
    ) -> None:
        self._node_ip = node_ip
        address = ipaddress.ip_address(node_ip)
        self._loopback = address.is_loopback
        self._node_net = f"{address}/{address.max_prefixlen}"
        self._redis_url = redis_url
        self._requested_port = port
        self._log_path = log_path
        self._tmpdir: tempfile.TemporaryDirectory[str] | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._finalizer: weakref.finalize | None = None
        self._port = 0
        self._udp_port = 0

    @property
    def api_key(self) -> str:
        return DEV_API_KEY

    @property
    def api_secret(self) -> str:
        return DEV_API_SECRET

    @property
    def port(self) -> int:
        if not self._port:
            raise RuntimeError("LiveKitServer is not started")
        return self._port

    @property
    def udp_port(self) -> int:
        """The one UDP port all WebRTC media of this node goes through."""
        if not self._udp_port:
            raise RuntimeError("LiveKitServer is not started")
        return self._udp_port

    @property
    def pid(self) -> int:
        if self._proc is None:
            raise RuntimeError("LiveKitServer is not started")
        return self._proc.pid

    @property
    def url(self) -> str:
        return f"ws://{self._node_ip}:{self.port}"

    @property
    def http_url(self) -> str:
        return f"http://{self._node_ip}:{self.port}"

    @property
    def log_path(self) -> Path:
        if self._log_path is None:
            raise RuntimeError("LiveKitServer is not started")
        return self._log_path

    def livekit_settings(self, agent_name: str = "voxroom") -> LiveKitSettings:
        return LiveKitSettings(
            url=self.url, api_key=self.api_key, api_secret=self.api_secret, agent_name=agent_name
        )

    def _config(self, http_port: int, tcp_port: int, udp_port: int) -> dict[str, object]:
        """The node's configuration (livekit-server's YAML keys)."""
        conf: dict[str, object] = {
            "port": http_port,
            # Loopback node: listen on loopback only. LAN node: all interfaces, so that both
            # this machine and other devices reach it.
            "bind_addresses": ["127.0.0.1"] if self._loopback else ["0.0.0.0"],
            "keys": {DEV_API_KEY: DEV_API_SECRET},
            # Development mode accepts the short dev secret without logging an error; it also
            # serves /debug/pprof, so it is only on while nothing but this machine can connect.
            "development": self._loopback,
            "rtc": {
                "tcp_port": tcp_port,
                "udp_port": udp_port,
                # No STUN lookup of a public address: advertise exactly node_ip.
                "use_external_ip": False,
                "node_ip": self._node_ip,
                # The UDP mux binds only node_ip; loopback must be enabled explicitly.
                "ips": {"includes": [self._node_net]},
                "enable_loopback_candidate": self._loopback,
            },
            "logging": {"level": "info", "json": False},
        }
        if self._redis_url:
            conf["redis"] = _redis_config(self._redis_url)
        return conf

    def start(self, timeout_s: float = 20.0) -> None:
        """Start the node and return once its HTTP endpoint answers."""
        if self._proc is not None:
            raise RuntimeError("LiveKitServer is already started")
        binary = find_livekit_server()
        self._tmpdir = tempfile.TemporaryDirectory(prefix="voxroom-livekit-")
        tmp = Path(self._tmpdir.name)
        tcp_ports, (self._udp_port,) = _free_ports(
            "0.0.0.0", tcp=1 if self._requested_port else 2, udp=1
        )
        self._port = self._requested_port or tcp_ports.pop()
        config_path = tmp / "livekit.yaml"
        # JSON is valid YAML, and needs no YAML library.
        config = self._config(self._port, tcp_ports[0], self._udp_port)
        config_path.write_text(json.dumps(config, indent=2))
        if self._log_path is None:
            self._log_path = tmp / "livekit-server.log"
        self._log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self._log_path, "ab") as log:
            log_start = log.tell()
            self._proc = subprocess.Popen(
                [str(binary), "--config", str(config_path)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        # Never leave an orphan server behind, even when stop() is not reached.
        self._finalizer = weakref.finalize(self, _kill, self._proc)
        try:
            self._wait_ready(log_start, timeout_s)
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self, log_start: int, timeout_s: float) -> None:
        """Ready = this process has bound its ports (it logs that) and its HTTP answers.
        The HTTP answer alone could come from another server already on an explicit port."""
        assert self._proc is not None and self._log_path is not None
        # Loopback requests must not go through an HTTP proxy from the environment.
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise LiveKitServerError(
                    f"livekit-server exited with code {self._proc.returncode}:\n{self.log_tail()}"
                )
            with open(self._log_path, "rb") as log:
                log.seek(log_start)
                bound = b"starting LiveKit server" in log.read()
            try:
                with opener.open(self.http_url + "/", timeout=0.5) as resp:
                    if bound and resp.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.05)
        raise LiveKitServerError(
            f"livekit-server did not answer on {self.http_url} within {timeout_s:.0f} s:\n"
            f"{self.log_tail()}"
        )

    def log_tail(self, lines: int = 40) -> str:
        if self._log_path is None or not self._log_path.exists():
            return "(no log)"
        text = self._log_path.read_text(encoding="utf-8", errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        """Stop the node: a graceful SIGTERM, then (participants still connected) a forced one."""
        proc, self._proc = self._proc, None
        if proc is not None:
            if self._finalizer is not None:
                self._finalizer.detach()
            _stop(proc)
        if self._tmpdir is not None:
            # The log is kept only when the caller chose where it goes.
            if self._log_path is not None and self._log_path.parent == Path(self._tmpdir.name):
                self._log_path = None
            self._tmpdir.cleanup()
            self._tmpdir = None

    def __enter__(self) -> LiveKitServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _stop(proc: subprocess.Popen[bytes]) -> None:
    # livekit-server drains on the first signal (waits for participants to leave) and stops
    # at once on the second.
    for sig, wait_s in ((signal.SIGTERM, 3.0), (signal.SIGTERM, 5.0)):
        if proc.poll() is not None:
            return
        proc.send_signal(sig)
        try:
            proc.wait(wait_s)
            return
        except subprocess.TimeoutExpired:
            continue
    _kill(proc)


def _kill(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m agent.ops.livekit_server", description="manage the livekit-server binary"
    )
    parser.add_argument(
        "--ensure",
        action="store_true",
        required=True,
        help="print the path of livekit-server, building it with Go first if needed",
    )
    parser.parse_args(argv)
    try:
        print(find_livekit_server(build=True))
    except LiveKitServerMissing as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
