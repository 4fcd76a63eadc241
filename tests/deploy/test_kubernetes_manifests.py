"""The Kubernetes manifests load into the official client's models exactly (a typo fails) and keep the hardening."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml

from openenv_echo.envs import ENVIRONMENTS

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"
MODELS = {
    ("apps/v1", "Deployment"): "V1Deployment",
    ("v1", "Service"): "V1Service",
    ("autoscaling/v2", "HorizontalPodAutoscaler"): "V2HorizontalPodAutoscaler",
}


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _model(doc: dict[str, Any]) -> Any:
    """The client model for ``doc``; an unknown key would be dropped, so the round trip must give ``doc`` back."""
    name = MODELS[(doc["apiVersion"], doc["kind"])]
    api = kubernetes.client.ApiClient()
    obj = api._ApiClient__deserialize(doc, name)
    assert api.sanitize_for_serialization(obj) == doc, (
        f"{doc['kind']} {doc['metadata']['name']}: unknown or mistyped keys"
    )
    return obj


def test_one_manifest_per_registered_env() -> None:
    assert sorted(p.stem for p in DEPLOY.glob("*.yaml")) == sorted(ENVIRONMENTS)


@pytest.mark.parametrize("env", sorted(ENVIRONMENTS))
def test_manifest_round_trips_and_is_hardened(env: str) -> None:
    docs = _docs(DEPLOY / f"{env}.yaml")
    assert sorted(d["kind"] for d in docs) == ["Deployment", "HorizontalPodAutoscaler", "Service"]
    objs = {d["kind"]: _model(d) for d in docs}
    dep, svc, hpa = objs["Deployment"], objs["Service"], objs["HorizontalPodAutoscaler"]
    pod = dep.spec.template.spec
    assert dep.spec.selector.match_labels == dep.spec.template.metadata.labels == svc.spec.selector
    assert pod.security_context.run_as_non_root and pod.security_context.run_as_user == 65532
    assert pod.automount_service_account_token is False
    (c,) = pod.containers
    assert c.image == f"openenv-echo/{env}:latest"
    sc = c.security_context
    assert sc.read_only_root_filesystem and sc.allow_privilege_escalation is False and sc.capabilities.drop == ["ALL"]
    assert c.resources.limits["memory"] and c.resources.limits["cpu"]
    # probes go to the probe listener (answered under floods of the main port): liveness /health, readiness /ready
    assert (c.liveness_probe.http_get.path, c.liveness_probe.http_get.port) == ("/health", "probes")
    assert (c.readiness_probe.http_get.path, c.readiness_probe.http_get.port) == ("/ready", "probes")
    assert [(p.name, p.container_port) for p in c.ports] == [("http", 8000), ("probes", 8001)]
    assert dep.spec.template.metadata.annotations["prometheus.io/port"] == "8001"
    # /tmp is the only writable path; the shell env's server also reads the TLS client certificate of its engine
    assert [m.mount_path for m in c.volume_mounts] == (["/tmp", "/certs"] if env == "shell" else ["/tmp"])
    assert all(m.read_only for m in c.volume_mounts if m.mount_path != "/tmp")
    assert not any(v.host_path for v in pod.volumes)  # never a node's files (its Docker socket least of all)
    assert svc.spec.ports[0].target_port == "http"
    assert hpa.spec.scale_target_ref.name == dep.metadata.name
    (metric,) = hpa.spec.metrics
    assert metric.pods.metric.name == "openenv_echo_sessions_active"


def test_a_typo_fails_the_round_trip() -> None:
    doc = _docs(DEPLOY / "echo.yaml")[0]
    doc["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = doc["spec"]["template"]["spec"]["containers"][
        0
    ].pop("readinessProbe")
    with pytest.raises(AssertionError, match="mistyped"):
        _model(doc)
