"""The disk benches, small: a batch leaves its repository's size or less on the disk (the shared
store, no workspace per ended task-run) and keeps it after `session rm` of all but one; forks cost
a sliver of fresh sessions."""

from __future__ import annotations

import json

import pytest

from tests.agent.conftest import Harness

pytestmark = [pytest.mark.docker, pytest.mark.timeout(600)]


def test_bench_batch_disk_and_bench_fork(tmp_path, run_label):
    harness = Harness(tmp_path / "state", f"{run_label}-disk")
    ran = harness("bench", "batch", "--disk", "--tasks", "4", "--repo-mb", "3", "--json", timeout=500)
    assert ran.code == 0, ran.stderr
    disk = json.loads(ran.stdout)
    assert disk["verified"] == 4 and disk["disk_over_repo"] <= 2, disk
    assert disk["after_rm_over_repo"] <= disk["disk_over_repo"] and disk["peak_over_repo"] >= disk["disk_over_repo"]
    forked = harness("bench", "fork", "--files", "500", "--forks", "3", "--json", timeout=300)
    assert forked.code == 0, forked.stderr
    fork = json.loads(forked.stdout)
    assert fork["disk_over_fresh"] <= 0.1 and fork["fork_bytes"] > 0 and fork["fresh_bytes"] > 0, fork
