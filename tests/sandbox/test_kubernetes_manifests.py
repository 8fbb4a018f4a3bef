"""The Kubernetes backend's manifests, checked where no cluster is: each validates strictly against the
Kubernetes schemas (kubernetes-validate's offline copies, the oldest and newest release it holds that
harness targets), and holds the call posture a Docker call has: harness's user, no capabilities, no
escalation, no token, no host namespaces, the spec's limits as a Guaranteed pod, /tmp in memory at the
spec's size, a RuntimeClass, labels a prune finds; the policy lets the pod reach only its proxy."""

from __future__ import annotations

import re

import kubernetes_validate
import pytest

from sandbox import labels
from sandbox.kubernetes.manifests import egress_policy, label_value, pod_name, sandbox_pod
from sandbox.spec import SandboxSpec

VERSIONS = ("1.30", kubernetes_validate.latest_version())
DNS_LABEL = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")
LABEL_VALUE = re.compile(r"([A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?)?")


@pytest.mark.parametrize("version", VERSIONS)
def test_the_sandbox_pod_validates_and_keeps_the_call_posture(version):
    spec = SandboxSpec(cpus=1.5, memory="768m", tmpfs="128m", labels={"harness.session": "s1", "bad key!": "x"})
    pod = sandbox_pod(
        spec, image="harness/py311:abc", session="s1", run_id="run-1", workspace_bytes=2 * 1024**3, deadline_s=3600
    )
    kubernetes_validate.validate(pod, version, strict=True)
    body = pod["spec"]
    [container] = body["containers"]
    context = container["securityContext"]
    assert context["runAsNonRoot"] and context["runAsUser"] == 10001 and not context["allowPrivilegeEscalation"]
    assert context["capabilities"] == {"drop": ["ALL"]} and context["readOnlyRootFilesystem"] is True
    assert context["seccompProfile"] == {"type": "RuntimeDefault"} and not context["privileged"]
    assert body["automountServiceAccountToken"] is False and body["enableServiceLinks"] is False
    assert not (body["hostNetwork"] or body["hostPID"] or body["hostIPC"])
    assert (
        container["resources"]["limits"]
        == container["resources"]["requests"]
        == {"cpu": "1500m", "memory": str(768 * 1024**2)}
    )
    tmp = next(v for v in body["volumes"] if v["name"] == "tmp")
    assert tmp["emptyDir"] == {"medium": "Memory", "sizeLimit": str(128 * 1024**2)}
    assert body["runtimeClassName"] == "gvisor" and body["activeDeadlineSeconds"] == 3600
    marks = pod["metadata"]["labels"]
    assert marks[labels.RUN] == "run-1" and marks[labels.SESSION] == "s1" and "bad key!" not in marks
    assert pod["metadata"]["annotations"]["harness.pids"] == "256", "a node setting on Kubernetes: kept for the record"


def test_names_and_labels_from_hostile_session_ids_are_valid_and_distinct():
    ids = ["S" * 200, "s" * 200, "ÿ../../etc", "a b\nc", "-leading", "x" * 63, ""]
    names = {pod_name(i) for i in ids}
    values = {label_value(i) for i in ids}
    assert len(names) == len(values) == len(ids), "no two sessions share a name or a label value"
    assert all(DNS_LABEL.fullmatch(name) and len(name) <= 63 for name in names), names
    assert all(LABEL_VALUE.fullmatch(value) and len(value) <= 63 for value in values), values
    pod = sandbox_pod(SandboxSpec(read_only_root=False), image="i", session=ids[2], run_id=ids[3], runtime_class=None)
    kubernetes_validate.validate(pod, VERSIONS[-1], strict=True)
    assert "runtimeClassName" not in pod["spec"] and pod["metadata"]["annotations"]["harness.session-id"] == ids[2]


@pytest.mark.parametrize("version", VERSIONS)
def test_the_policy_lets_the_pod_reach_its_proxy_alone(version):
    policy = egress_policy(session="s1", proxy_port=3128)
    kubernetes_validate.validate(policy, version, strict=True)
    spec = policy["spec"]
    assert spec["policyTypes"] == ["Ingress", "Egress"] and spec["ingress"] == []
    [rule] = spec["egress"]
    assert rule["to"] == [{"podSelector": {"matchLabels": {labels.SESSION: "s1", "harness.role": "egress-proxy"}}}]
    assert rule["ports"] == [{"protocol": "TCP", "port": 3128}]
    closed = egress_policy(session="s1", proxy_port=None)
    kubernetes_validate.validate(closed, version, strict=True)
    assert closed["spec"]["egress"] == [], "no proxy: nothing, DNS included"
