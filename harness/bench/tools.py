"""`harness bench tools`: read_file end to end vs a bare `exec_run cat`, side by side in one run.

read_file goes through the registry, the gate and a DockerSandbox whose pool is warm (as in real
use: one fresh pre-started container per call). The baseline execs `cat` into ONE long-lived
container of the same image with the same workspace mounted. Measurements alternate between the two
sides so machine noise hits both alike; `load_1m` (the 1-minute load average at the end) says how
much noise there was.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from harness.bench.measure import median, ratio, side_by_side
from harness.policy.gate import Gate
from harness.tools.builtin import default_registry, make_context
from harness.types import ToolCall
from sandbox.docker import hardening
from sandbox.docker.containers import DockerSandbox
from sandbox.docker.engine import resolve_image
from sandbox.labels import of_process
from sandbox.owner import container_user, hand_over
from sandbox.spec import SandboxSpec

PAUSE_S = 0.4
"""Quiet time before each measurement: the pool replaces a used container between model turns too."""
SMALL_FILE = "".join(f"line {n}: some text of a small source file\n" for n in range(1, 41))


def measure(client: Any, *, image: str = "py311", rounds: int = 25) -> dict[str, float]:
    """{'read_file_ms', 'exec_cat_ms', 'read_file_over_exec', 'rounds', 'load_1m'} (medians, milliseconds)."""
    run_id = f"bench-tools-{uuid.uuid4().hex[:10]}"
    with tempfile.TemporaryDirectory(prefix="harness-bench-tools-") as tmp:
        workspace = Path(tmp) / "workspace"
        workspace.mkdir()
        (workspace / "small.py").write_text(SMALL_FILE)
        hand_over(workspace)
        spec = SandboxSpec(image=image, timeout_s=30, labels={"harness.bench": "tools"})
        registry = default_registry()
        with (
            DockerSandbox(client, run_id=run_id, pool_size=2) as box,
            _long_lived(client, image, workspace, run_id) as box_cat,
        ):
            ctx = make_context(box, workspace, spec, Gate())
            box.prewarm(workspace=workspace, spec=spec, mounts=ctx.mounts)
            call = ToolCall(id="bench", name="read_file", arguments={"path": "small.py"})

            def read_file() -> None:
                result = registry.execute(call, ctx)
                if result.is_error:
                    raise RuntimeError(f"bench read_file failed: {result.text}")

            samples = side_by_side(
                {"read_file": read_file, "exec_cat": lambda: box_cat.exec_run(["cat", "/workspace/small.py"])},
                rounds=rounds,
                between=lambda: time.sleep(PAUSE_S),
                warmup=3,  # warm both paths (pool, image cache, page cache)
            )
    read, cat = median(samples["read_file"], 2), median(samples["exec_cat"], 2)
    return {
        "read_file_ms": read,
        "exec_cat_ms": cat,
        "read_file_over_exec": ratio(read, cat, 3),
        "rounds": rounds,
        "load_1m": round(os.getloadavg()[0], 2),
    }


@contextlib.contextmanager
def _long_lived(client: Any, image: str, workspace: Path, run_id: str) -> Any:
    _, image_id = resolve_image(client, image)
    container = client.containers.run(
        image_id,
        hardening.KEEPALIVE,
        detach=True,
        init=True,
        network_mode="none",
        user=container_user(),
        volumes={str(workspace): {"bind": "/workspace", "mode": "ro"}},
        labels=of_process(run_id, "bench"),
        cap_drop=["ALL"],
        security_opt=["no-new-privileges"],
        read_only=True,
    )
    try:
        yield container
    finally:
        with contextlib.suppress(Exception):
            container.remove(force=True)
