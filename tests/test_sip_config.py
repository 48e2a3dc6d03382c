"""infra/sip/: the LiveKit SIP inbound trunk and dispatch rule that route phone callers into
a room of their own with the voxroom agent, checked against LiveKit's own protocol messages
and created on a real livekit-server (livekit-sip itself cannot run here)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from google.protobuf import json_format
from livekit.protocol import sip

from agent.config import LiveKitSettings
from agent.ops.livekit_server import LiveKitServer
from tests.marks import DEV_SECRET

SIP_DIR = Path(__file__).resolve().parent.parent / "infra" / "sip"
DOC = Path(__file__).resolve().parent.parent / "docs" / "sip.md"


def _trunk_request() -> sip.CreateSIPInboundTrunkRequest:
    # Parse refuses unknown or misspelled fields: what `lk sip inbound create` would reject.
    text = (SIP_DIR / "inbound-trunk.json").read_text()
    return json_format.Parse(text, sip.CreateSIPInboundTrunkRequest())


def _rule_request() -> sip.CreateSIPDispatchRuleRequest:
    text = (SIP_DIR / "dispatch-rule.json").read_text()
    return json_format.Parse(text, sip.CreateSIPDispatchRuleRequest())


def test_trunk_accepts_calls_only_from_the_provider() -> None:
    trunk = _trunk_request().trunk
    assert trunk.numbers and all(n.startswith("+") for n in trunk.numbers)
    assert trunk.allowed_addresses  # no open SIP endpoint for the whole Internet


def test_dispatch_rule_gives_each_caller_a_room_with_the_voxroom_agent() -> None:
    rule = _rule_request().dispatch_rule
    assert rule.rule.WhichOneof("rule") == "dispatch_rule_individual"
    assert rule.rule.dispatch_rule_individual.room_prefix
    agents = [a.agent_name for a in rule.room_config.agents]
    assert agents == [LiveKitSettings().agent_name]  # what `voxroom agent` registers as


def test_sip_service_config_and_the_doc() -> None:
    config = yaml.safe_load((SIP_DIR / "sip-config.yaml").read_text())
    assert {"api_key", "api_secret", "ws_url", "redis", "sip_port", "rtp_port"} <= set(config)
    doc = DOC.read_text()
    for name in ("inbound-trunk.json", "dispatch-rule.json", "sip-config.yaml"):
        assert f"infra/sip/{name}" in doc


@pytest.mark.integration
@DEV_SECRET
async def test_livekit_server_takes_the_trunk_and_the_rule(redis_url: str) -> None:
    from livekit import api

    with LiveKitServer(redis_url=redis_url) as server:
        async with api.LiveKitAPI(server.http_url, server.api_key, server.api_secret) as lk:
            trunk = await lk.sip.create_sip_inbound_trunk(_trunk_request())
            rule = await lk.sip.create_sip_dispatch_rule(_rule_request())
            rules = await lk.sip.list_sip_dispatch_rule(sip.ListSIPDispatchRuleRequest())
    assert trunk.sip_trunk_id.startswith("ST_")
    assert [r.sip_dispatch_rule_id for r in rules.items] == [rule.sip_dispatch_rule_id]
    assert rules.items[0].room_config.agents[0].agent_name == LiveKitSettings().agent_name
