"""`voxroom token`: a join token for one room, with the least a voice user needs.

The user may join that one room, publish only a microphone, subscribe, and send data
(text chat). By default the token also asks LiveKit to dispatch the voxroom agent to the
room when the user joins, so no one has to create the room or the dispatch beforehand.

With `--copilot` the dispatch's metadata makes the agent the user's interview copilot
(agent.copilot.room): it answers in writing to this user only, from the meeting audio that
`voxroom bridge` publishes. `--bridge-for CANDIDATE` makes the token of such a bridge
(`voxroom bridge --token`): the copilot listens only to a bridge whose token names its
candidate. `--resume` and `--job-description` name documents in the
worker's $VOXROOM_CONTEXT_DIR (text, markdown or PDF, at most 200 kB); a client can instead
upload them into the room (topic `voxroom.context`). LiveKit applies a token's dispatch only
when its join creates the room: join before the bridge, or dispatch the agent yourself.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import warnings
from collections.abc import Mapping
from pathlib import PurePath

from agent.config import LiveKitSettings, load_settings
from agent.protocol import ATTR_BRIDGE_CANDIDATE, DOCUMENT_KEYS, KEY_CANDIDATE, KEY_MODE, KEY_USER

# The secret of `livekit-server --dev`, the default in agent/config.py.
_DEV_SECRET = LiveKitSettings().api_secret


def create_join_token(
    settings: LiveKitSettings,
    room: str,
    identity: str,
    *,
    name: str | None = None,
    ttl_s: int = 600,
    dispatch_agent: bool = True,
    metadata: str = "",
    dispatch_metadata: str = "",
    attributes: Mapping[str, str] | None = None,
) -> str:
    """A signed JWT that lets `identity` join `room` on the server of `settings`.
    `metadata` and `attributes` are the participant's (its grants do not let it change them);
    `dispatch_metadata` goes to the agent's job."""
    import jwt
    from livekit import api

    if not room or not identity:
        raise ValueError("room and identity must not be empty")
    if ttl_s <= 0:
        raise ValueError(f"ttl_s must be positive, got {ttl_s}")
    if dispatch_metadata and not dispatch_agent:
        raise ValueError("dispatch metadata needs the dispatch")
    grants = api.VideoGrants(
        room_join=True,
        room=room,
        can_publish=True,
        can_publish_sources=["microphone"],
        can_subscribe=True,
        can_publish_data=True,
    )
    token = (
        api.AccessToken(settings.api_key, settings.api_secret)
        .with_identity(identity)
        .with_grants(grants)
        .with_ttl(datetime.timedelta(seconds=ttl_s))
    )
    if name:
        token.with_name(name)
    if metadata:
        token.with_metadata(metadata)
    if attributes:
        token.with_attributes(dict(attributes))
    if dispatch_agent:
        # The agent serves this user, not whoever else reaches the room first.
        job = json.loads(dispatch_metadata) if dispatch_metadata else {}
        job.setdefault(KEY_USER, identity)
        token.with_room_config(
            api.RoomConfiguration(
                agents=[
                    api.RoomAgentDispatch(agent_name=settings.agent_name, metadata=json.dumps(job))
                ]
            )
        )
    with warnings.catch_warnings():
        if settings.api_secret == _DEV_SECRET:
            # Short on purpose; a real deployment's secret still gets PyJWT's warning.
            warnings.simplefilter("ignore", jwt.InsecureKeyLengthWarning)
        return token.to_jwt()


def create_bridge_token(
    settings: LiveKitSettings,
    room: str,
    identity: str,
    candidate: str,
    *,
    name: str | None = None,
    ttl_s: int = 600,
    copilot_mode: bool = False,
) -> str:
    """A token for `voxroom bridge` in `room`: it publishes the meeting audio of `candidate`'s
    interview, and the attribute `voxroom.bridge.candidate` says so. Only a holder of the API
    secret can make one; the copilot of `candidate` listens to no other `meeting-audio`
    (agent.copilot.room.bridges_for). `copilot_mode` also asks for copilot mode (metadata). It
    dispatches no agent."""
    if not candidate:
        raise ValueError("a bridge token names the candidate it serves")
    return create_join_token(
        settings,
        room,
        identity,
        name=name,
        ttl_s=ttl_s,
        dispatch_agent=False,
        metadata=json.dumps({KEY_MODE: "copilot"}) if copilot_mode else "",
        attributes={ATTR_BRIDGE_CANDIDATE: candidate},
    )


def copilot_metadata(
    candidate: str, *, resume: str | None = None, job_description: str | None = None
) -> str:
    """Dispatch metadata that makes the agent `candidate`'s interview copilot, with the file
    names of their documents in the worker's context directory."""
    value: dict[str, str] = {KEY_MODE: "copilot", KEY_CANDIDATE: candidate}
    for key, name in zip(DOCUMENT_KEYS, (resume, job_description), strict=True):
        if name is None:
            continue
        path = PurePath(name)
        if not name or path.is_absolute() or ".." in path.parts:
            raise ValueError(
                f"{name!r}: name a file inside the worker's $VOXROOM_CONTEXT_DIR, relative to it"
            )
        value[key] = name
    return json.dumps(value)


def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--room", required=True, help="room to join")
    parser.add_argument(
        "--identity", required=True, help="participant identity (unique in the room)"
    )
    parser.add_argument("--name", help="display name")
    parser.add_argument(
        "--ttl",
        type=_positive_int,
        default=600,
        metavar="SECONDS",
        help="how long the token may be used to join (default: 600)",
    )
    parser.add_argument(
        "--no-dispatch",
        action="store_true",
        help="do not ask LiveKit to dispatch the voxroom agent to the room",
    )
    parser.add_argument(
        "--copilot",
        action="store_true",
        help="the agent is this participant's interview copilot (written answers to the "
        "questions heard through `voxroom bridge`)",
    )
    parser.add_argument(
        "--bridge-for",
        metavar="CANDIDATE",
        help="a token for `voxroom bridge --token`: the meeting audio of this candidate's "
        "interview, the only one their copilot listens to (no dispatch)",
    )
    for flag in ("--resume", "--job-description"):
        parser.add_argument(
            flag,
            metavar="NAME",
            help=f"with --copilot: the {flag[2:].replace('-', ' ')}, a file in the worker's "
            "$VOXROOM_CONTEXT_DIR (text, markdown or PDF, at most 200 kB)",
        )


def run(args: argparse.Namespace) -> int:
    settings = load_settings(args.config)
    dispatch_metadata = ""
    try:
        if args.bridge_for is not None:
            if args.copilot or args.resume or args.job_description:
                raise ValueError(
                    "--bridge-for makes a bridge's token: it dispatches no agent, "
                    "so it cannot go with --copilot, --resume or --job-description"
                )
            print(
                create_bridge_token(
                    settings.livekit,
                    args.room,
                    args.identity,
                    args.bridge_for,
                    name=args.name,
                    ttl_s=args.ttl,
                )
            )
            return 0
        if (args.resume or args.job_description) and not args.copilot:
            raise ValueError("--resume and --job-description need --copilot")
        if args.copilot:
            if args.no_dispatch:
                raise ValueError("--copilot tells the dispatch: it cannot go with --no-dispatch")
            dispatch_metadata = copilot_metadata(
                args.identity, resume=args.resume, job_description=args.job_description
            )
    except ValueError as e:
        print(f"voxroom token: {e}", file=sys.stderr)
        return 2
    print(
        create_join_token(
            settings.livekit,
            args.room,
            args.identity,
            name=args.name,
            ttl_s=args.ttl,
            dispatch_agent=not args.no_dispatch,
            dispatch_metadata=dispatch_metadata,
        )
    )
    return 0
