"""`harness bench integrations` runs both integrations and the backends they replace side by side
and leaves nothing behind (the figures themselves are the bench's business, not a test's)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(300)]
HARNESS = str(Path(sys.executable).parent / "harness")


def test_bench_integrations_measures_both_pairs(run_label: str, docker_client) -> None:
    done = subprocess.run(
        [HARNESS, "bench", "integrations", "--rounds", "3", "--json"],
        capture_output=True,
        text=True,
        timeout=280,
        env={**os.environ, "HARNESS_RUN_ID": run_label},
    )
    assert done.returncode == 0, done.stderr
    figures = json.loads(done.stdout)
    for pair in ("mini_swe_agent", "inspect"):
        assert figures[pair]["ours"]["median_ms"] > 0 and figures[pair]["theirs"]["median_ms"] > 0
        assert figures[pair]["ours_over_theirs"] > 0
    assert docker_client.containers.list(all=True, filters={"label": f"harness.run={run_label}"}) == []
