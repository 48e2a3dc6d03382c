"""livekit-sip in the deployment files: the compose file's `sip` service and infra/k8s/sip/,
checked the way tests/test_infra.py checks the rest (parsed, validated against the Kubernetes
API schemas, cross-checked against the LiveKit configuration and infra/sip/sip-config.yaml).
livekit-sip itself cannot be built or run here."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
import yaml

from tests.test_infra import INFRA, MIN_KUBERNETES, compose, compose_livekit_config

K8S_SIP = INFRA / "k8s" / "sip"
SIP_CONFIG = INFRA / "sip" / "sip-config.yaml"


def sip_keys() -> set[str]:
    """The keys of the SIP service's configuration as docs/sip.md hands it to operators."""
    return set(yaml.safe_load(SIP_CONFIG.read_text(encoding="utf-8")))


def rtp_range(config: dict[str, Any]) -> tuple[int, int]:
    low, high = (int(p) for p in str(config["rtp_port"]).split("-"))
    assert 1024 < low <= high
    return low, high


# --- Docker Compose ----------------------------------------------------------------------------


def compose_sip_config() -> dict[str, Any]:
    """The compose `sip` service's configuration, as compose interpolates it."""
    body = compose()["services"]["sip"]["environment"]["SIP_CONFIG_BODY"]
    return yaml.safe_load(re.sub(r"\$\{([A-Z_]+)[^}]*\}", r"<\1>", body))


def test_compose_sip_shares_livekit_s_redis_and_keys() -> None:
    config = compose_sip_config()
    assert sip_keys() <= set(config) | {"use_external_ip"}
    livekit = compose_livekit_config()
    assert config["redis"]["address"] == livekit["redis"]["address"]
    ws = urlparse(config["ws_url"])
    assert (ws.scheme, ws.hostname, ws.port) == ("ws", "livekit", livekit["port"])
    # The pair LiveKit accepts (its LIVEKIT_KEYS), from the same variables.
    keys = compose()["services"]["livekit"]["environment"]["LIVEKIT_KEYS"]
    assert re.findall(r"\$\{([A-Z_]+)", keys) == ["LIVEKIT_API_KEY", "LIVEKIT_API_SECRET"]
    assert (config["api_key"], config["api_secret"]) == (
        "<LIVEKIT_API_KEY>",
        "<LIVEKIT_API_SECRET>",
    )
    assert config["nat_1_to_1_ip"] == "<NODE_IP>" and config["use_external_ip"] is False


def test_compose_sip_publishes_its_sip_and_rtp_ports() -> None:
    service = compose()["services"]["sip"]
    config = compose_sip_config()
    low, high = rtp_range(config)
    sip_port = config["sip_port"]
    assert {
        f"{sip_port}:{sip_port}/udp",
        f"{sip_port}:{sip_port}/tcp",
        f"{low}-{high}:{low}-{high}/udp",
    } <= set(service["ports"])
    assert {"livekit", "redis"} <= set(service["depends_on"])
    assert service["profiles"] == ["sip"]  # only for those with a trunk


# --- Kubernetes --------------------------------------------------------------------------------


def k8s_sip_docs() -> dict[str, dict[str, Any]]:
    docs: dict[str, dict[str, Any]] = {}
    for path in sorted(K8S_SIP.glob("*.yaml")):
        (doc,) = yaml.safe_load_all(path.read_text(encoding="utf-8"))
        assert doc["kind"] not in docs
        docs[doc["kind"]] = doc
    return docs


@pytest.mark.parametrize("version", [MIN_KUBERNETES, "latest"])
def test_k8s_sip_manifests_match_the_kubernetes_api_schemas(version: str) -> None:
    from kubernetes_validate import utils

    version = utils.latest_version() if version == "latest" else version
    for kind, doc in k8s_sip_docs().items():
        if kind != "Kustomization":
            utils.validate(doc, version, strict=True)


def test_k8s_sip_reads_its_configuration_from_the_secret() -> None:
    docs = k8s_sip_docs()
    deployment, secret = docs["Deployment"], docs["Secret"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    (env,) = container["env"]
    ref = env["valueFrom"]["secretKeyRef"]
    assert env["name"] == "SIP_CONFIG_BODY" and ref["name"] == secret["metadata"]["name"]
    config = yaml.safe_load(secret["stringData"][ref["key"]])
    assert sip_keys() <= set(config)
    assert urlparse(config["ws_url"]).port == compose_livekit_config()["port"]
    rtp_range(config)
    ports = {(p["containerPort"], p["protocol"]) for p in container["ports"]}
    assert {(config["sip_port"], "UDP"), (config["sip_port"], "TCP")} <= ports


def test_k8s_sip_runs_on_the_host_network_and_applies_all_but_the_secret() -> None:
    docs = k8s_sip_docs()
    spec = docs["Deployment"]["spec"]
    pod = spec["template"]["spec"]
    assert pod["hostNetwork"] is True and pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert spec["strategy"]["type"] == "Recreate"  # host ports: never two pods on one node
    assert spec["selector"]["matchLabels"].items() <= spec["template"]["metadata"]["labels"].items()
    expected = {
        p.name
        for p in K8S_SIP.glob("*.yaml")
        if p.name != "kustomization.yaml" and not p.name.endswith(".example.yaml")
    }
    assert sorted(docs["Kustomization"]["resources"]) == sorted(expected)


def test_the_doc_walks_through_both_deployments() -> None:
    doc = (Path(__file__).resolve().parent.parent / "docs" / "sip.md").read_text()
    for name in ("infra/k8s/sip", "--profile sip", "sip-secret.example.yaml"):
        assert name in doc
