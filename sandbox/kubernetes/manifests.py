"""A session's pod and its network policy, from the spec its calls run with (docs/scale.md).

The pod is the session's sandbox on a cluster: one container as harness's unprivileged user (uid
10001), every capability dropped, no privilege escalation, the runtime's default seccomp profile, a
read-only root unless the spec says otherwise, no service-account token, no host namespaces, no
service links; the workspace and /tmp are emptyDir volumes (/tmp in memory, sized as the spec's
tmpfs; the workspace sized by the session's quota); CPU and memory limits equal to its requests (the
Guaranteed class: a noisy neighbour cannot take them); a RuntimeClass (gVisor or Kata) when given; an
active deadline from the session's wall clock; labels that find it for a prune (run, session, kind).
Calls are execs into it; what the spec's `pids` asks is a node setting on Kubernetes (the kubelet's
podPidsLimit), said in the docs, not a field of the pod.

The network policy selects the session's pod and allows it no ingress and no egress but to the
session's egress proxy pod on its port: the allowlist and the secrets by placeholder stay in harness's
proxy, as on Docker. With no proxy the pod reaches nothing, DNS included."""

from __future__ import annotations

import hashlib
import re
from typing import Any

from sandbox import labels
from sandbox.spec import SandboxSpec

USER = 10001
"""harness's unprivileged user and group in every image (Dockerfile.sandbox)."""
CONTAINER = "sandbox"
PROXY_ROLE = "egress-proxy"
"""The `harness.role` label of a session's egress proxy pod."""
ROLE = "harness.role"
_LABEL_VALUE = re.compile(r"[^A-Za-z0-9_.-]+")


def label_value(text: str) -> str:
    """text as a label value (at most 63 characters, letters, digits, `-_.`, alphanumeric at both
    ends); one that had to change keeps a digest of the original, so two never collide."""
    cleaned = _LABEL_VALUE.sub("-", text).strip("-_.")
    if cleaned == text and len(text) <= 63:
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()[:10]
    return f"{cleaned[:52].strip('-_.')}-{digest}".strip("-")


def pod_name(session: str, n: int = 0) -> str:
    """A DNS label for the session's nth pod (lower case, at most 63 characters)."""
    base = re.sub(r"[^a-z0-9-]+", "-", session.lower()).strip("-")
    digest = hashlib.sha256(session.encode()).hexdigest()[:8]
    return f"harness-{base[:40].strip('-')}-{digest}-{n}".replace("--", "-")


def quantity_cpu(cpus: float) -> str:
    """Cores as a Kubernetes quantity (millicores)."""
    return f"{max(1, round(cpus * 1000))}m"


def sandbox_pod(
    spec: SandboxSpec,
    *,
    image: str,
    session: str,
    run_id: str,
    namespace: str = "harness",
    runtime_class: str | None = "gvisor",
    workspace_bytes: int | None = None,
    deadline_s: int | None = None,
    n: int = 0,
) -> dict[str, Any]:
    """The session's nth sandbox pod (a warm one when the session has not claimed it yet)."""
    marks = {
        labels.RUN: label_value(run_id),
        labels.SESSION: label_value(session),
        labels.KIND: "call",
        **{key: label_value(value) for key, value in spec.labels.items() if _label_key(key)},
    }
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["sleep", "infinity"],
        "workingDir": spec.workdir,
        "env": [{"name": "HOME", "value": "/tmp"}],
        "resources": {
            "limits": {"cpu": quantity_cpu(spec.cpus), "memory": str(spec.memory)},
            "requests": {"cpu": quantity_cpu(spec.cpus), "memory": str(spec.memory)},
        },
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": USER,
            "runAsGroup": USER,
            "allowPrivilegeEscalation": False,
            "privileged": False,
            "readOnlyRootFilesystem": spec.read_only_root,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "volumeMounts": [
            {"name": "workspace", "mountPath": spec.workdir},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
    }
    workspace: dict[str, Any] = {"sizeLimit": str(workspace_bytes)} if workspace_bytes else {}
    pod_spec: dict[str, Any] = {
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "hostNetwork": False,
        "hostPID": False,
        "hostIPC": False,
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 1,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": USER,
            "runAsGroup": USER,
            "fsGroup": USER,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [container],
        "volumes": [
            {"name": "workspace", "emptyDir": workspace},
            {"name": "tmp", "emptyDir": {"medium": "Memory", "sizeLimit": str(spec.tmpfs)}},
        ],
    }
    if runtime_class:
        pod_spec["runtimeClassName"] = runtime_class
    if deadline_s:
        pod_spec["activeDeadlineSeconds"] = int(deadline_s)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(session, n),
            "namespace": namespace,
            "labels": marks,
            "annotations": {"harness.session-id": session, "harness.pids": str(spec.pids)},
        },
        "spec": pod_spec,
    }


def egress_policy(*, session: str, namespace: str = "harness", proxy_port: int | None = 3128) -> dict[str, Any]:
    """The session's network policy: its pods take no ingress and reach nothing but the session's
    egress proxy pod on its port (nothing at all without one)."""
    selector = {labels.SESSION: label_value(session)}
    egress = []
    if proxy_port is not None:
        egress.append({
            "to": [{"podSelector": {"matchLabels": {**selector, ROLE: PROXY_ROLE}}}],
            "ports": [{"protocol": "TCP", "port": int(proxy_port)}],
        })  # fmt: skip
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": f"{pod_name(session)}-egress", "namespace": namespace, "labels": dict(selector)},
        "spec": {
            "podSelector": {"matchLabels": {**selector, labels.KIND: "call"}},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [],
            "egress": egress,
        },
    }


def _label_key(key: str) -> bool:
    """A label key Kubernetes takes as it is (an optional DNS prefix, a name of at most 63)."""
    prefix, _, name = key.rpartition("/")
    return bool(re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?", name)) and len(prefix) <= 253
