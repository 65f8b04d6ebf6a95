"""deploy/kubernetes (SPEC §18), proven offline: ``kubectl kustomize`` renders the base and the
PostgreSQL overlay, every rendered object validates strictly against the Kubernetes 1.33
schemas, and the pod has the shape the issue asks for (a native sidecar beside its parent,
probes on /livez and /readyz, the image's non-root user on a read-only root, a drain that fits
in the grace period).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from lastword.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy" / "kubernetes"
KUBERNETES_VERSION = "1.33.0"
KUBECTL = shutil.which("kubectl")

pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl (which carries kustomize) is not installed")


def render(name: str) -> list[dict[str, Any]]:
    out = subprocess.run([str(KUBECTL), "kustomize", str(DEPLOY / name)], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    return [obj for obj in yaml.safe_load_all(out) if obj]


def only(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found: list[dict[str, Any]] = [obj for obj in objects if obj["kind"] == kind]
    assert len(found) == 1, (kind, len(found))
    return found[0]


def pod_of(objects: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = only(objects, "Deployment")["spec"]["template"]["spec"]
    return spec


def container(pod: dict[str, Any], name: str) -> dict[str, Any]:
    found: list[dict[str, Any]] = [c for c in pod.get("initContainers", []) + pod["containers"] if c["name"] == name]
    assert len(found) == 1, (name, len(found))
    return found[0]


def env_of(c: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {entry["name"]: entry for entry in c.get("env", [])}


def image_uid() -> int:
    dockerfile = (ROOT / "Dockerfile").read_text()
    uid = int(re.search(r"--uid (\d+)", dockerfile).group(1))  # type: ignore[union-attr]
    assert re.search(rf"^USER {uid}:{uid}$", dockerfile, re.MULTILINE)
    return uid


def probe_target(probe: dict[str, Any]) -> str:
    """The path a probe asks for (an ``exec`` probe names the URL in its command)."""
    if "httpGet" in probe:
        return str(probe["httpGet"]["path"])
    (url,) = re.findall(r"http://127\.0\.0\.1:\d+(/\w+)", " ".join(probe["exec"]["command"]))
    return str(url)


@pytest.mark.parametrize("name", ["base", "postgres"])
def test_renders_and_validates_strictly_against_kubernetes_1_33(name: str) -> None:
    """Every object ``kubectl kustomize`` renders is valid under the 1.33 schemas, with no field
    the schema does not know."""
    objects = render(name)
    assert objects
    for obj in objects:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


def test_strict_validation_catches_a_misspelt_field() -> None:
    """The check can fail: a field the schema does not know is refused."""
    deployment = only(render("base"), "Deployment")
    pod_of([deployment])["initContainers"][0]["restartPolicyy"] = "Always"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize("name", ["base", "postgres"])
def test_lastword_is_a_native_sidecar_with_probes_a_safe_context_and_room_to_drain(name: str) -> None:
    """lastword is an init container with restartPolicy Always beside a parent that reaches it on
    localhost; startup and readiness ask /readyz, liveness /livez, on its port; it runs as the
    image's user on a read-only root with /data (and /tmp) on volumes; the grace period is
    longer than its drain; every variable has one value or one source."""
    pod = pod_of(render(name))
    (sidecar,) = pod["initContainers"]
    assert sidecar["name"] == "lastword" and sidecar["restartPolicy"] == "Always"
    env = env_of(sidecar)
    port = env["LASTWORD_PORT"]["value"]
    assert [p["containerPort"] for p in sidecar["ports"]] == [int(port)]
    parent = container(pod, "parent")
    assert env_of(parent)["LASTWORD_URL"]["value"] == f"http://127.0.0.1:{port}"

    assert probe_target(sidecar["startupProbe"]) == "/readyz"
    assert probe_target(sidecar["readinessProbe"]) == "/readyz"
    assert probe_target(sidecar["livenessProbe"]) == "/livez"
    for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
        probe = sidecar[kind]
        if "exec" in probe:
            assert f"127.0.0.1:{port}/" in " ".join(probe["exec"]["command"])
        else:
            assert probe["httpGet"]["port"] in ("http", int(port))

    uid = image_uid()
    security = pod["securityContext"]
    assert security["runAsNonRoot"] is True
    assert security["runAsUser"] == security["runAsGroup"] == security["fsGroup"] == uid
    for c in (sidecar, parent):
        assert c["securityContext"]["readOnlyRootFilesystem"] is True
        assert c["securityContext"]["allowPrivilegeEscalation"] is False
        assert c["securityContext"]["capabilities"]["drop"] == ["ALL"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in sidecar["volumeMounts"]}
    assert "/data" in mounts and "/tmp" in mounts
    assert "emptyDir" in volumes[mounts["/data"]] or "persistentVolumeClaim" in volumes[mounts["/data"]]
    assert sidecar["resources"]["requests"]["memory"] and sidecar["resources"]["limits"]["memory"]

    drain = float(env["LASTWORD_DRAIN_SECONDS"]["value"]) if "LASTWORD_DRAIN_SECONDS" in env \
        else Settings.model_fields["drain_seconds"].default
    assert pod["terminationGracePeriodSeconds"] > drain
    for c in (sidecar, parent):
        for entry in c.get("env", []):
            assert ("value" in entry) != ("valueFrom" in entry), entry


def test_the_base_keeps_lastword_on_loopback_with_sqlite_on_an_emptydir() -> None:
    """In the base only the pod's containers reach lastword (loopback, probes run inside it),
    and its SQLite file is on the data volume."""
    pod = pod_of(render("base"))
    env = env_of(container(pod, "lastword"))
    assert env["LASTWORD_HOST"]["value"] == "127.0.0.1"
    assert env["LASTWORD_DATABASE_URL"]["value"] == "sqlite:////data/lastword.db"
    assert all("exec" in container(pod, "lastword")[kind] for kind in ("startupProbe", "readinessProbe", "livenessProbe"))


def test_the_postgres_overlay_runs_replicas_behind_a_service_with_secrets() -> None:
    """The overlay: ≥ 2 replicas, a Service and a PodDisruptionBudget that select the pods,
    the database URL and both tokens from a Secret, the parent given the ingest token."""
    objects = render("postgres")
    deployment = only(objects, "Deployment")
    assert deployment["spec"]["replicas"] >= 2
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    service, budget = only(objects, "Service"), only(objects, "PodDisruptionBudget")
    assert service["spec"]["selector"].items() <= labels.items()
    assert service["spec"]["ports"][0]["targetPort"] == "http"
    assert budget["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert budget["spec"].get("maxUnavailable", 0) >= 1 or budget["spec"].get("minAvailable", 0) >= 1
    pod = deployment["spec"]["template"]["spec"]
    env = env_of(container(pod, "lastword"))
    assert env["LASTWORD_HOST"]["value"] == "0.0.0.0"
    for name in ("LASTWORD_DATABASE_URL", "LASTWORD_INGEST_TOKEN", "LASTWORD_READ_TOKEN"):
        assert env[name]["valueFrom"]["secretKeyRef"]["name"] == "lastword", name
    assert env_of(container(pod, "parent"))["LASTWORD_TOKEN"]["valueFrom"]["secretKeyRef"]["key"] == "ingest-token"


def test_the_image_is_set_in_one_place_by_the_kustomization() -> None:
    """Every container's image comes from the base's ``images:`` (``kustomize edit set image``)."""
    import yaml

    kustomization = yaml.safe_load((ROOT / "deploy" / "kubernetes" / "base" / "kustomization.yaml").read_text())
    [image] = kustomization["images"]
    for name in ("base", "postgres"):
        pod = pod_of(render(name))
        images = {c["image"] for c in pod.get("initContainers", []) + pod["containers"]}
        assert images == {f"{image['newName']}:{image['newTag']}"}, (name, images)


#: Kinds of operators' resources that the Kubernetes schemas do not hold (checked by shape below).
CUSTOM_KINDS = {("postgresql.cnpg.io/v1", "Cluster")}


@pytest.mark.parametrize("name", ["ha", "ha-nats"])
def test_the_ha_overlays_render_and_their_kubernetes_objects_validate_strictly(name: str) -> None:
    """The HA overlays render; each built-in object is valid under the 1.33 schemas, and the only
    other object is the CloudNativePG Cluster."""
    objects = render(name)
    custom = [obj for obj in objects if (obj["apiVersion"], obj["kind"]) in CUSTOM_KINDS]
    assert [obj["kind"] for obj in custom] == ["Cluster"]
    for obj in objects:
        if obj not in custom:
            kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


def test_the_ha_overlay_runs_replicas_on_a_synchronous_three_instance_cluster() -> None:
    """Three PostgreSQL instances, every commit waiting for a standby; the replicas' database URL
    is the one the operator writes for the Cluster (its read-write Service, which follows the
    primary); the tokens still come from the Secret ``lastword``; LISTEN/NOTIFY stays the default."""
    objects = render("ha")
    cluster = only(objects, "Cluster")
    assert cluster["spec"]["instances"] == 3
    assert cluster["spec"]["postgresql"]["synchronous"]["number"] >= 1
    deployment = only(objects, "Deployment")
    assert deployment["spec"]["replicas"] >= 2
    env = env_of(container(pod_of(objects), "lastword"))
    url = env["LASTWORD_DATABASE_URL"]["valueFrom"]["secretKeyRef"]
    assert url == {"name": f"{cluster['metadata']['name']}-app", "key": "uri"}
    for name in ("LASTWORD_INGEST_TOKEN", "LASTWORD_READ_TOKEN"):
        assert env[name]["valueFrom"]["secretKeyRef"]["name"] == "lastword", name
    assert "LASTWORD_FANOUT_URL" not in env


def test_the_nats_option_sets_the_fanout_url_and_nothing_else() -> None:
    """ha-nats is ha with LASTWORD_FANOUT_URL naming a NATS Service; every other object and
    variable is the same."""
    ha, with_nats = render("ha"), render("ha-nats")
    env = env_of(container(pod_of(with_nats), "lastword"))
    assert env.pop("LASTWORD_FANOUT_URL")["value"].startswith("nats://")
    assert env == env_of(container(pod_of(ha), "lastword"))
    assert [(obj["kind"], obj["metadata"]["name"]) for obj in with_nats] == [
        (obj["kind"], obj["metadata"]["name"]) for obj in ha]
    Settings(database_url="postgresql://x@y/z", fanout_url=env_of(container(pod_of(with_nats), "lastword"))[
        "LASTWORD_FANOUT_URL"]["value"])
