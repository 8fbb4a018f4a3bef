"""`harness bench run` once (two rounds, a run id of its own): its figures, and no container left."""

import pytest

from sandbox.docker.prune import prune

pytestmark = [pytest.mark.docker, pytest.mark.timeout(300)]


def test_bench_run_reports_the_ratios_as_json_and_leaves_no_container(harness, docker_client, run_label):
    own = f"{run_label}-bench"  # a run id of its own: other tests' containers carry run_label
    try:
        ran = harness("bench", "run", "--json", "--rounds", "2", env={"HARNESS_RUN_ID": own})
        assert ran.code == 0, ran.stderr
        figures = ran.json()
        # six calls of the example, and the verify command once more on the start state (what ran there
        # is counted once per state directory: each round's sessions are new)
        assert figures["outcome"] == "verified" and figures["steps"] == 5 and figures["sandbox_calls"] == 7
        assert figures["rounds"] == 2 and len(figures["ratios"]) == 2
        assert figures["overhead_ms_per_step"] > 0 and figures["bare_ms"] > 0
        # The reported ratio is the median of the per-round ratios (the mean of two), each run over its bare.
        assert figures["run_over_bare"] == pytest.approx(sum(figures["ratios"]) / 2, abs=0.011)
        assert min(figures["ratios"]) <= figures["run_over_bare"] <= max(figures["ratios"])
        # The warm side: a warm service of the bench's own lent every round's session its six containers.
        assert figures["warm_outcome"] == "verified" and figures["warm_borrowed"] == 6
        assert len(figures["warm_ratios"]) == 2 and figures["warm_run_over_bare"] > 0
        left = docker_client.containers.list(all=True, filters={"label": f"harness.run={own}"}, ignore_removed=True)
        assert left == []
    finally:
        prune(docker_client, everything=True, run_id=own)
