"""`harness bench integrations`: per-call latency of the two integrations against the backends they
replace, side by side in one run (same image, same command, rounds interleaved, a quiet pause
before each call as a model turn would leave).

- mini-swe-agent: `HarnessEnvironment.execute` (each action in a fresh hardened container of one
  session, committed as a step) against mini-swe-agent's own `DockerEnvironment.execute` (the
  `docker` CLI execing `bash -lc` into one long-lived container).
- Inspect AI: the harness sandbox's `exec` against `docker exec` by the CLI into one long-lived
  container, which is what Inspect's docker sandbox does beneath `docker compose exec` (compose
  adds its own start-up on top; it cannot be installed on machines without Docker's registry, so
  this side is a lower bound for Inspect's docker sandbox).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from harness.bench.measure import Latency, latency, ratio, side_by_side
from harness.errors import ConfigError

PAUSE_S = 0.4
COMMAND = "cat /etc/hostname"


class Pair(BaseModel):
    ours: Latency
    theirs: Latency
    ours_over_theirs: float
    theirs_is: str


class IntegrationFigures(BaseModel):
    image: str
    rounds: int
    mini_swe_agent: Pair
    inspect: Pair
    load_1m: float


def measure(*, image: str = "py311", rounds: int = 20, run_id: str | None = None) -> IntegrationFigures:
    from harness.integrations.box import Box, BoxConfig
    from sandbox.docker.engine import connect, resolve_image
    from sandbox.docker.prune import prune

    os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")  # this process's own banner, nothing passed on
    try:
        from minisweagent.environments.docker import DockerEnvironment

        from harness.integrations.inspect_sandbox import HarnessSandboxEnvironment
        from harness.integrations.minisweagent import HarnessEnvironment
    except ImportError as error:
        raise ConfigError(
            f"the integrations bench needs both extras: pip install 'harness[inspect,mini]' ({error.name} is missing)"
        ) from None
    run = run_id or f"bench-integrations-{uuid.uuid4().hex[:10]}"
    client = connect()
    ref, _ = resolve_image(client, image)
    with tempfile.TemporaryDirectory(prefix="harness-bench-integrations-") as tmp:
        state = Path(tmp) / "sessions"
        quiet = logging.getLogger("harness.bench.integrations")  # mini-swe-agent's own logger prints to stdout
        quiet.propagate = False
        theirs_mini = DockerEnvironment(
            image=ref, cwd="/", run_args=["--rm", "--label", f"harness.run={run}"], logger=quiet
        )
        ours_mini = HarnessEnvironment(image=image, state_dir=state, run_id=run, keep_session=False, logger=quiet)
        inspect_box = Box(BoxConfig(image=image, state_dir=state, run_id=run, keep_session=False), name="bench")
        ours_inspect = HarnessSandboxEnvironment(inspect_box)
        loop = asyncio.new_event_loop()
        try:
            live = theirs_mini.container_id or ""
            samples = side_by_side(
                {
                    "mini_ours": lambda: _ok(ours_mini.execute({"command": COMMAND})["returncode"]),
                    "mini_theirs": lambda: _ok(theirs_mini.execute({"command": COMMAND})["returncode"]),
                    "inspect_ours": lambda: _ok(
                        loop.run_until_complete(ours_inspect.exec(["cat", "/etc/hostname"])).returncode
                    ),
                    "inspect_theirs": lambda: _ok(
                        subprocess.run(["docker", "exec", live, "cat", "/etc/hostname"], capture_output=True).returncode
                    ),
                },
                rounds=rounds,
                between=lambda: time.sleep(PAUSE_S),
                warmup=2,
            )
        finally:
            loop.close()
            ours_mini.cleanup()
            inspect_box.close()
            with contextlib.suppress(subprocess.SubprocessError, OSError):
                subprocess.run(["docker", "rm", "-f", theirs_mini.container_id or ""], capture_output=True, timeout=60)
            prune(client, everything=True, run_id=run)

    def pair(ours: str, theirs: str, what: str) -> Pair:
        a, b = latency(samples[ours]), latency(samples[theirs])
        return Pair(ours=a, theirs=b, ours_over_theirs=ratio(a.median_ms, b.median_ms), theirs_is=what)

    return IntegrationFigures(
        image=image,
        rounds=rounds,
        mini_swe_agent=pair("mini_ours", "mini_theirs", "DockerEnvironment"),
        inspect=pair("inspect_ours", "inspect_theirs", "docker exec (live)"),
        load_1m=round(os.getloadavg()[0], 2),
    )


def _ok(code: Any) -> None:
    if code != 0:
        raise RuntimeError(f"bench call failed with exit code {code}")
