"""`voxroom demo`: everything for talking to the agent from a browser on this machine.

LiveKit mode (the default): it uses the LiveKit server at the configured URL when one answers
there, else starts livekit-server on port 7880 (building it with Go when needed); then starts
an agent worker (`voxroom agent`) as a child process, waits until it has registered with
LiveKit, and serves the web page and its token endpoint. Ctrl-C (or SIGTERM) stops the page,
the worker and the server it started, in that order.

Direct mode (`--direct`, or when there is no livekit-server and no Go to build one): one
process loads the models and the page's browser talks to it over WebRTC
(agent/transports/direct.py); one user at a time.

Off this machine, joining needs an access code (VOXROOM_WEB_SHARED_SECRET; the demo makes one
up when it listens beyond loopback and none is set) or an authenticating reverse proxy (see
agent/transports/web_server.py).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

from agent.config import LiveKitSettings, Settings, load_settings
from agent.worker.drain import stop_on_signals

if TYPE_CHECKING:
    from aiohttp import web

    from agent.transports.web_server import WebSettings

REPO_ROOT = Path(__file__).resolve().parents[2]
WEB_DIR = REPO_ROOT / "web"
DEMO_LIVEKIT_PORT = 7880
DEFAULT_ROOM = "voxroom-demo"  # also the default of the page's room field (web/index.html)
# What `voxroom agent` prints once LiveKit has accepted it as a worker.
REGISTERED_MARK = "worker registered"
LOG_TAIL_LINES = 30


class DemoError(RuntimeError):
    """Something the demo needs did not start; the message says what and where to look."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="address of the web page (default: %(default)s; 0.0.0.0 for other devices too)",
    )
    parser.add_argument(
        "--port", type=int, default=8080, help="port of the web page (default: %(default)s)"
    )
    parser.add_argument(
        "--room", default=DEFAULT_ROOM, help="room the page offers (default: %(default)s)"
    )
    parser.add_argument(
        "--direct",
        action="store_true",
        help="no LiveKit server: the browser talks to this process over WebRTC (one user)",
    )
    parser.add_argument(
        "--worker-timeout",
        type=float,
        default=180.0,
        metavar="SECONDS",
        help="how long the agent worker may take to load its models and register "
        "(default: %(default)s)",
    )


def run(args: argparse.Namespace) -> int:
    from agent.config import ConfigError
    from agent.transports.web_server import WebSettings

    settings = load_settings(args.config)
    try:
        web_settings = _with_access_code(WebSettings.from_env(), args.host)
    except ConfigError as e:
        print(f"voxroom demo: {e}", file=sys.stderr)
        return 2
    static_dir = ensure_web_build(WEB_DIR)
    if static_dir is None:
        return 1
    log_dir = Path(tempfile.gettempdir()) / "voxroom-demo"
    log_dir.mkdir(exist_ok=True)
    # Until the event loop takes over the signals, SIGTERM unwinds like Ctrl-C, so that a
    # livekit-server started below is stopped, not orphaned.
    previous = signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
    try:
        with contextlib.ExitStack() as stack:
            livekit = None if args.direct else _livekit(settings.livekit, log_dir, stack)
            if livekit is None:
                print(
                    "Mode: direct. The browser talks to this process over WebRTC, with no "
                    "LiveKit server; one user at a time.",
                    flush=True,
                )
                return asyncio.run(_serve_direct(args, settings, web_settings, static_dir))
            print(f"Mode: LiveKit, server at {livekit.url}.", flush=True)
            settings = replace(settings, livekit=livekit)
            return asyncio.run(_serve(args, settings, web_settings, static_dir, log_dir))
    except DemoError as e:
        print(f"voxroom demo: {e}", file=sys.stderr)
        return 1
    finally:
        signal.signal(signal.SIGTERM, previous)


def _raise_keyboard_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _with_access_code(web_settings: WebSettings, host: str) -> WebSettings:
    """Listening beyond loopback with no way in for other devices: make up an access code."""
    import secrets

    if _is_loopback_host(host) or web_settings.remote_access:
        return web_settings
    return replace(web_settings, shared_secret=secrets.token_urlsafe(12))


def ensure_web_build(web_dir: Path) -> Path | None:
    """web/dist, built with npm when it is missing and npm is here; None (and a message) if not."""
    dist = web_dir / "dist"
    if (dist / "index.html").is_file():
        return dist
    npm = shutil.which("npm")
    if npm is None or not (web_dir / "package.json").is_file():
        print(
            f"voxroom demo: the web page is not built ({dist / 'index.html'} is missing). "
            "Run `make web` (it needs Node.js and npm), then start the demo again.",
            file=sys.stderr,
        )
        return None
    print("Building the web page (npm ci, npm run build)...", flush=True)
    for step in (["ci", "--no-audit", "--no-fund"], ["run", "build"]):
        if subprocess.run([npm, *step], cwd=web_dir).returncode != 0:
            print(f"voxroom demo: `npm {' '.join(step)}` failed in {web_dir}", file=sys.stderr)
            return None
    return dist


def _livekit(
    configured: LiveKitSettings, log_dir: Path, stack: contextlib.ExitStack
) -> LiveKitSettings | None:
    """The configured LiveKit server if it answers, else one started here (stopped by `stack`);
    None when there is no livekit-server binary and none can be built."""
    if _answers(configured.url):
        print(f"Using the LiveKit server already running at {configured.url}.", flush=True)
        return configured
    from agent.ops.livekit_server import (
        LiveKitServer,
        LiveKitServerError,
        LiveKitServerMissing,
        find_livekit_server,
    )

    try:
        find_livekit_server(build=True)
    except LiveKitServerMissing as e:
        print(
            f"No LiveKit server answers at {configured.url}, and none can be started here: {e}",
            flush=True,
        )
        return None
    log_path = log_dir / "livekit-server.log"
    log_path.unlink(missing_ok=True)
    print(
        f"No LiveKit server answers at {configured.url}; starting livekit-server on port "
        f"{DEMO_LIVEKIT_PORT} (log: {log_path}).",
        flush=True,
    )
    server = LiveKitServer(DEMO_LIVEKIT_PORT, log_path=log_path)
    try:
        server.start()
    except (LiveKitServerError, LiveKitServerMissing) as e:
        raise DemoError(str(e)) from e
    stack.callback(server.stop)
    return server.livekit_settings(agent_name=configured.agent_name)


def _answers(url: str) -> bool:
    """Whether a LiveKit server answers its health check (GET / -> 200) at `url`."""
    http = url.replace("ws://", "http://", 1).replace("wss://", "https://", 1)
    # A local server must not be looked for through an HTTP proxy from the environment.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(http.rstrip("/") + "/", timeout=1.0) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _restore_signals() -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.remove_signal_handler(sig)


async def _serve(
    args: argparse.Namespace,
    settings: Settings,
    web_settings: WebSettings,
    static_dir: Path,
    log_dir: Path,
) -> int:
    from agent.transports.web_server import create_web_app

    stop = stop_on_signals()
    worker = WorkerProcess(settings.livekit, config=args.config, log_path=log_dir / "worker.log")
    try:
        print(
            f"Starting the agent worker; it loads its models, then registers "
            f"(log: {worker.log_path}).",
            flush=True,
        )
        await worker.start()
        if not await _until_stopped(worker.wait_registered(args.worker_timeout), stop):
            return 0
        print("The agent worker is registered.", flush=True)
        app = create_web_app(settings, static_dir=static_dir, web_settings=web_settings)
        async with _site(app, args, web_settings):
            exited = asyncio.ensure_future(worker.wait_exited())
            try:
                if await _until_stopped(exited, stop):
                    raise DemoError(
                        f"the agent worker exited (code {worker.returncode}); the end of its "
                        f"log:\n{worker.log_tail()}"
                    )
            finally:
                exited.cancel()
        return 0
    finally:
        print("Stopping...", flush=True)
        await worker.stop()
        _restore_signals()


async def _serve_direct(
    args: argparse.Namespace, settings: Settings, web_settings: WebSettings, static_dir: Path
) -> int:
    from agent.adapters.providers import load_speech_engines, open_llm
    from agent.adapters.turn_detector import load_detector
    from agent.transports.direct import DirectAgent, create_direct_web_app
    from agent.transports.room_io import OUTPUT_RATE

    stop = stop_on_signals()
    try:
        print("Loading the speech models...", flush=True)
        stt, tts = await asyncio.to_thread(
            load_speech_engines, OUTPUT_RATE, settings.stt, settings.tts
        )
        detector = await asyncio.to_thread(load_detector, settings.turn.detector)
        print("Starting the language model...", flush=True)
        async with open_llm(settings.llm) as llm:
            agent = DirectAgent(
                stt=stt,
                llm=llm,
                tts=tts,
                system_prompt=settings.llm.system_prompt,
                turn_detector=detector,
                barge_in=settings.turn.barge_in,
            )
            app = create_direct_web_app(agent, static_dir=static_dir, web_settings=web_settings)
            async with _site(app, args, web_settings):
                await stop.wait()
        return 0
    finally:
        print("Stopping...", flush=True)
        _restore_signals()


@contextlib.asynccontextmanager
async def _site(
    app: web.Application, args: argparse.Namespace, web_settings: WebSettings
) -> AsyncIterator[None]:
    """Serve `app` on --host/--port and say where, until the block ends."""
    from aiohttp import web

    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        try:
            await web.TCPSite(runner, args.host, args.port).start()
        except OSError as e:
            raise DemoError(
                f"cannot serve the page on {args.host}:{args.port} ({e.strerror or e}); "
                "choose another with --port"
            ) from e
        print(f"\nOpen {_page_url(args.host, args.port, args.room)} and click Join.", flush=True)
        if not _is_loopback_host(args.host):
            if web_settings.shared_secret:
                # In the fragment: it reaches the page, never a server log or a Referer.
                remote = _page_url(args.host, args.port, args.room, remote=True)
                print(
                    f"Other devices open {remote}#code={quote(web_settings.shared_secret)}\n"
                    "(browsers allow the microphone only on https:// pages or on localhost: "
                    "put an HTTPS reverse proxy in front for phones).",
                    flush=True,
                )
            else:
                print("Other devices join once the reverse proxy has authenticated them.")
        print("Press Ctrl-C to stop.", flush=True)
        yield
    finally:
        await runner.cleanup()


async def _until_stopped(awaitable, stop: asyncio.Event) -> bool:
    """Await `awaitable` unless `stop` is set first; True when `awaitable` finished."""
    task = asyncio.ensure_future(awaitable)
    stopped = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait((task, stopped), return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
    if not task.done():
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        return False
    task.result()  # raises what the awaitable raised
    return True


def _is_loopback_host(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def _page_url(host: str, port: int, room: str, *, remote: bool = False) -> str:
    if host in ("", "0.0.0.0", "::"):
        # Listening everywhere: this machine is one of the places; others use its address.
        host = "<this machine's address>" if remote else "127.0.0.1"
    elif ":" in host:
        host = f"[{host}]"
    query = "" if room == DEFAULT_ROOM else f"/?room={quote(room)}"
    return f"http://{host}:{port}{query}"


class WorkerProcess:
    """`voxroom agent` as a child process writing its output to a log file.

    The child runs in its own process group: Ctrl-C reaches only the demo, which stops the
    worker in order, and a forced stop takes any processes the worker started with it. Output
    goes to a file, not a pipe, so processes the worker leaves behind cannot hold us up.
    """

    def __init__(self, livekit: LiveKitSettings, *, config: str | None, log_path: Path) -> None:
        self.livekit = livekit
        self.config = config
        self.log_path = log_path
        self._proc: asyncio.subprocess.Process | None = None

    @property
    def returncode(self) -> int | None:
        return None if self._proc is None else self._proc.returncode

    async def start(self) -> None:
        command = [sys.executable, "-m", "agent.cli"]
        if self.config:
            command += ["--config", self.config]
        command.append("agent")
        env = {
            **os.environ,
            "LIVEKIT_URL": self.livekit.url,
            "LIVEKIT_API_KEY": self.livekit.api_key,
            "LIVEKIT_API_SECRET": self.livekit.api_secret,
            "VOXROOM_LIVEKIT_AGENT_NAME": self.livekit.agent_name,
            "PYTHONUNBUFFERED": "1",  # the log shows what happened up to a crash
            # `-m agent.cli` finds this checkout even when voxroom is not installed.
            "PYTHONPATH": os.pathsep.join(
                p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p
            ),
        }
        log = await asyncio.to_thread(open, self.log_path, "wb")
        with log:
            self._proc = await asyncio.create_subprocess_exec(
                *command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )

    async def wait_registered(self, timeout_s: float, poll_s: float = 0.1) -> None:
        """Return once the worker says it registered; DemoError if it exits or times out."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        scanned = 0
        while True:
            exited = self.returncode is not None  # before reading: its last words are in
            data = await asyncio.to_thread(self._read_log, scanned)
            if REGISTERED_MARK.encode() in data:
                return
            scanned += data.rfind(b"\n") + 1  # whole lines only: the mark may be half written
            if exited:
                problem = f"the agent worker exited (code {self.returncode}) before it registered"
                break
            if loop.time() >= deadline:
                problem = f"the agent worker did not register within {timeout_s:.0f} s"
                break
            await asyncio.sleep(poll_s)
        raise DemoError(f"{problem}; the end of its log ({self.log_path}):\n{self.log_tail()}")

    def _read_log(self, offset: int = 0) -> bytes:
        with open(self.log_path, "rb") as f:
            f.seek(offset)
            return f.read()

    async def wait_exited(self) -> int:
        assert self._proc is not None
        return await self._proc.wait()

    def log_tail(self) -> str:
        lines = self._read_log().decode("utf-8", errors="replace").splitlines()[-LOG_TAIL_LINES:]
        return "\n".join(lines) or "(no output)"

    async def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM so the worker leaves its rooms; then the whole process group is killed."""
        proc = self._proc
        if proc is None:
            return
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), grace_s)
            except TimeoutError:
                print(f"The agent worker did not stop within {grace_s:.0f} s; killing it.")
        # Whatever the worker left running in its group (job processes) goes with it.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()


def _die_with_parent() -> None:
    """In the child before exec: get SIGTERM when the demo dies, even by SIGKILL (Linux)."""
    if sys.platform == "linux":
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None).prctl(pr_set_pdeathsig, signal.SIGTERM)
