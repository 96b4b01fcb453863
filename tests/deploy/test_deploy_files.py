"""deploy/ kept honest (issue 21, point 4). Container images cannot be pulled here, so the files
are checked against the code: every ENGRAM_* variable they set is a real setting, every probe
path answers 200 on a served app, every `engram` command they run parses, the manifests parse
and carry a Deployment with probes and resource requests, its Service, HorizontalPodAutoscaler,
PodDisruptionBudget, migration Job, ConfigMap and Secret, and compose runs the migrations once
before two replicas behind nginx."""

from __future__ import annotations

import asyncio
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from litestar.testing import AsyncTestClient

from app import DISTRIBUTION
from app.cli import build_parser
from tests.support.settings import engram_variables

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "k8s" / "base"
DOCKERFILE = (DEPLOY / "Dockerfile").read_text()


def manifests() -> dict[str, dict[str, Any]]:
    """The kustomize base's resources, by kind."""
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    found = {}
    for name in kustomization["resources"]:
        for doc in yaml.safe_load_all((K8S / name).read_text()):
            found[doc["kind"]] = doc
    return found


def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    return loaded


def exec_form(instruction: str) -> list[list[str]]:
    """The JSON (exec) form arguments of every Dockerfile `instruction` line."""
    return [yaml.safe_load(m) for m in re.findall(rf"^{instruction} (\[.*\])$", DOCKERFILE, re.M)]


def test_every_engram_variable_set_is_a_real_setting() -> None:
    files = [DEPLOY / "Dockerfile", DEPLOY / "compose.yaml", *sorted(K8S.glob("*.yaml"))]
    used = {v for f in files for v in re.findall(r"\bENGRAM_[A-Z0-9_]+", f.read_text())}
    assert used, "no variable found: the pattern is wrong"
    assert used <= engram_variables(), used - engram_variables()


def commands() -> list[list[str]]:
    kinds = manifests()
    pod = kinds["Deployment"]["spec"]["template"]["spec"]
    job = kinds["Job"]["spec"]["template"]["spec"]
    run = [line.split()[1:] for line in re.findall(r"^RUN engram .*$", DOCKERFILE, re.M)]
    return [
        *exec_form("CMD"),
        *run,
        *(c["command"] for c in pod["containers"] + job["containers"]),
        *(s["command"] for s in compose()["services"].values() if "command" in s),
    ]


def test_every_command_run_is_an_engram_command() -> None:
    found = commands()
    assert ["engram", "migrate"] in found and ["engram", "serve"] in found
    assert ["engram", "prepare-model"] in found
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["engram"] == "app.cli:main"
    for command in found:
        assert command[0] == "engram", command
        build_parser().parse_args(command[1:])  # exits 2 on an unknown command or flag


def probe_paths() -> set[str]:
    pod = manifests()["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    paths = {pod[p]["httpGet"]["path"] for p in ("readinessProbe", "livenessProbe")}
    paths |= set(re.findall(r"http://127\.0\.0\.1:8000(/\w+)", DOCKERFILE))
    annotations = manifests()["Deployment"]["spec"]["template"]["metadata"]["annotations"]
    return paths | {annotations["prometheus.io/path"]}


async def test_every_probe_path_answers_200(make_app) -> None:
    paths = probe_paths()
    assert paths == {"/ready", "/health", "/metrics"}, paths
    async with AsyncTestClient(app=make_app()) as client:
        for path in sorted(paths):
            for _ in range(100):  # /ready waits for the model to load
                r = await client.get(path)
                if r.status_code == 200:
                    break
                await asyncio.sleep(0.1)
            assert r.status_code == 200, (path, r.text)


def test_the_manifests_carry_what_a_cluster_needs() -> None:
    kinds = manifests()
    assert set(kinds) == {"Deployment", "Service", "HorizontalPodAutoscaler",
                          "PodDisruptionBudget", "Job", "ConfigMap", "Secret"}  # fmt: skip
    deployment = kinds["Deployment"]
    pod = deployment["spec"]["template"]
    labels = pod["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()
    (container,) = pod["spec"]["containers"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/ready"
    assert container["livenessProbe"]["httpGet"]["path"] == "/health"
    assert {"cpu", "memory"} <= set(container["resources"]["requests"])
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    env_from = {next(iter(ref.values()))["name"] for ref in container["envFrom"]}
    assert env_from == {kinds["ConfigMap"]["metadata"]["name"], kinds["Secret"]["metadata"]["name"]}
    assert kinds["Service"]["spec"]["selector"].items() <= labels.items()
    assert kinds["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"].items() <= labels.items()
    target = kinds["HorizontalPodAutoscaler"]["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", deployment["metadata"]["name"])
    (migrate,) = kinds["Job"]["spec"]["template"]["spec"]["containers"]
    assert (
        migrate["command"] == ["engram", "migrate"] and migrate["envFrom"] == container["envFrom"]
    )


def test_compose_migrates_once_then_runs_two_replicas_behind_nginx() -> None:
    services = compose()["services"]
    assert services["db"]["image"].startswith("pgvector/pgvector:")
    assert services["redis"]["image"].startswith("redis:")
    assert services["migrate"]["command"] == ["engram", "migrate"]
    assert services["engram"]["deploy"]["replicas"] == 2
    assert services["engram"]["depends_on"]["migrate"]["condition"] == (
        "service_completed_successfully")  # fmt: skip
    assert services["lb"]["image"].startswith("nginx:")
    nginx = (DEPLOY / "nginx.conf").read_text()
    assert "server engram:8000" in nginx and "proxy_pass http://engram;" in nginx


def test_the_dockerfile_builds_in_two_stages_and_runs_unprivileged() -> None:
    assert len(re.findall(r"^FROM ", DOCKERFILE, re.M)) == 2
    users = re.findall(r"^USER (\S+)$", DOCKERFILE, re.M)
    assert users and users[-1] not in ("root", "0")
    # the model is built as that user, into the cache the server reads (ENGRAM_MODEL_CACHE)
    assert DOCKERFILE.index("USER ") < DOCKERFILE.index("RUN engram prepare-model")
    assert "ENGRAM_MODEL_CACHE=" in DOCKERFILE
    assert re.search(r"^HEALTHCHECK .*\n?.*CMD", DOCKERFILE, re.M)
    copied = re.findall(r"^COPY (?!--from)(.*) \S+$", DOCKERFILE, re.M)
    for name in " ".join(copied).split():  # what the build stage copies exists
        assert (ROOT / name).exists(), name


@pytest.mark.parametrize("name", [DISTRIBUTION])
def test_the_distribution_is_named_apart_from_pypis_engram(name: str) -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["name"] == name == "engram-x402"
    assert "engram" in project["scripts"]
