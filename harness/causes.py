"""The machine's failures a run can end on (what `harness.types` and the plain readers share, without
the message models `harness.types` builds)."""

from __future__ import annotations

from typing import Literal, get_args

Cause = Literal[
    "endpoint_unreachable",
    "key_rejected",
    "engine_unavailable",
    "image_missing",
    "runtime_missing",
    "workspace_failed",
    "snapshot_failed",
    "sandbox_failed",
]
"""Why a run ended by the machine's fault, not the agent's: the model endpoint could not be reached,
or it rejected the key (a `model_error`), or the sandbox could not run the calls (an `infra_error`: the engine gone, an image
or runtime missing mid-run, the workspace or its snapshots failing, any other engine failure such
as a container that would not start). A batch tries such a run again, and the report leaves it out
of the completion rate. The sandbox's error classes name theirs (`SandboxError.infra_cause`)."""

INFRA_CAUSES: frozenset[str] = frozenset(get_args(Cause))
