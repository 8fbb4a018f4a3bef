"""The labels every container and image harness makes carries: the one place their names live.

Labels are how leftovers are found after a crash (`harness sandbox prune`), how a session's
containers and images are told apart from another session's, and how the setup cache is looked up.
Values are plain strings, so any engine that keeps labels can carry them.
"""

from __future__ import annotations

import json

RUN = "harness.run"
"""The controller run that made the object (`$HARNESS_RUN_ID` in tests)."""
PID = "harness.pid"
"""The controller's process id: a container whose controller is gone is a leftover."""
OWNER = "harness.owner"
"""That process's identity (its start time, boot, machine and pid namespace: sandbox.process), so a
reused pid or another machine's is never taken for the maker."""
KIND = "harness.kind"
"""What the object is: call (pooled), netns (holder), setup, step, bench, exec, warm (the warm service)."""
SESSION = "harness.session"
"""The session id, on every container and committed image of a session."""
STATE = "harness.state"
"""The session's state directory: session ids are unique only within one directory."""
SETUP_KEY = "harness.setup.key"
"""Cache key of a setup image; step commits blank it so a step image is never taken for setup."""
SETUP_NETWORK = "harness.setup.network"
"""The network mode the setup commands ran with."""
IMAGE = "harness.image"
"""On a built image: its name (`base` on the bootstrapped base)."""
CONTENT = "harness.content"
"""On a built image: the content hash its tag is made of."""


def of_run(run_id: str, kind: str | None = None, **extra: str) -> dict[str, str]:
    """The labels of an object made by run_id (of the given kind), plus extra ones."""
    labels = {RUN: run_id, **({KIND: kind} if kind else {})}
    labels.update(extra)
    return labels


def owner() -> dict[str, str]:
    """The labels naming this process as an object's maker (its pid and identity)."""
    import os

    from sandbox.process import identity

    return {PID: str(os.getpid()), OWNER: identity()}


def of_process(run_id: str, kind: str) -> dict[str, str]:
    """The labels of a container this process made and owns while it lives: `harness sandbox prune`
    run anywhere (another terminal, another test) leaves it alone until this process is gone."""
    return of_run(run_id, kind, **owner())


def of_session(session_id: str, state_dir: str) -> dict[str, str]:
    """The labels that tie an object to one session of one state directory."""
    return {SESSION: session_id, STATE: state_dir}


def instructions(labels: dict[str, str]) -> list[str]:
    """`LABEL key="value"` changes for a `docker commit` or `docker import` (values JSON-quoted)."""
    return [f"LABEL {key}={json.dumps(value)}" for key, value in labels.items()]
