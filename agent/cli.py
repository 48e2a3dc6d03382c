"""The `voxroom` console command. Each subcommand lives in its own module, imported lazily
so that `voxroom token` does not pay for loading speech models."""

from __future__ import annotations

import argparse
import importlib
import sys

# name -> (module, one-line help). Each module defines `add_arguments(parser)` and
# `run(args) -> int`. The product reaches the bench package only here, by name.
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "agent": ("agent.worker.worker", "run an agent worker that LiveKit dispatches to rooms"),
    "bench": ("bench.cli", "latency per stage over a spoken corpus, simulate or through LiveKit"),
    "bridge": ("room_bridge.cli", "publish this computer's output audio into a room"),
    "demo": ("agent.apps.demo", "start livekit-server, a worker and the web page on localhost"),
    "doctor": ("agent.apps.doctor", "check each configured engine end to end and print what works"),
    "loadtest": ("bench.loadtest", "simulated users in rooms: dispatch, voice-to-voice, CPU, RAM"),
    "models": ("agent.models", "prepare and check the bundled offline models"),
    "simulate": ("agent.apps.simulate", "run the voice pipeline on a WAV file, no LiveKit"),
    "token": ("agent.transports.tokens", "print a join token for a room"),
    "transcripts": ("agent.store.transcripts", "print the stored conversation turns"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="voxroom", description="Low-latency voice agents on LiveKit"
    )
    parser.add_argument(
        "--config", help="path to voxroom.toml (default: ./voxroom.toml if present)"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module, help_text) in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(_module=module)
        _load(module).add_arguments(p)
    return parser


def _load(module: str):
    return importlib.import_module(module)


def main(argv: list[str] | None = None) -> int:
    from agent.models import passive_openmp

    passive_openmp()  # before the engines' libraries load
    from agent.log_redaction import install_log_redaction

    install_log_redaction()  # before anything logs: no secret reaches a log line
    args = build_parser().parse_args(argv)
    from agent.config import ConfigError

    try:
        return int(_load(args._module).run(args) or 0)
    except ConfigError as e:
        print(f"voxroom: configuration error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
