"""The Kubernetes backend's manifests (docs/scale.md): what a session claims on a cluster, rendered from
the same `SandboxSpec` every Docker call runs with. Pure: manifests out, nothing applied; a cluster's
controller (or `kubectl apply`) applies them. The call path over the stream API is the design's next
part and needs a cluster to be tested."""
