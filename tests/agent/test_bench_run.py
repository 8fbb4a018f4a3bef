"""`harness bench run` once (one round, a run id of its own): its figures, and no container left; and how
the figures of several rounds are summed up (each ratio taken within its round, then the median)."""

import pytest

from harness.bench.run import Round, summary
from sandbox.docker.prune import prune


@pytest.mark.docker
@pytest.mark.timeout(300)
def test_bench_run_reports_the_ratios_as_json_and_leaves_no_container(harness, docker_client, run_label):
    own = f"{run_label}-bench"  # a run id of its own: other tests' containers carry run_label
    try:
        ran = harness("bench", "run", "--json", "--rounds", "1", env={"HARNESS_RUN_ID": own})
        assert ran.code == 0, ran.stderr
        figures = ran.json()
        # six calls of the example, and the verify command once more on the start state (what ran there
        # is counted once per state directory: each round's sessions are new)
        assert figures["outcome"] == "verified" and figures["steps"] == 5 and figures["sandbox_calls"] == 7
        assert figures["rounds"] == 1 and figures["ratios"] == [figures["run_over_bare"]]
        assert figures["overhead_ms_per_step"] > 0 and figures["bare_ms"] > 0 and figures["start_ms"] > 0
        assert figures["run_over_bare"] == pytest.approx(figures["run_ms"] / figures["bare_ms"], abs=0.011)
        # The warm side: a warm service of the bench's own lent the round's session its six containers.
        assert figures["warm_outcome"] == "verified" and figures["warm_borrowed"] == 6
        assert figures["warm_ratios"] == [figures["warm_run_over_bare"]] and figures["warm_run_over_bare"] > 0
        left = docker_client.containers.list(all=True, filters={"label": f"harness.run={own}"}, ignore_removed=True)
        assert left == []
    finally:
        prune(docker_client, everything=True, run_id=own)


def _round(run_ms: float, bare_ms: float, warm_run_ms: float, borrowed: int, overheads: list[float]) -> Round:
    return Round(
        outcome="verified", steps=5, overheads=overheads, run_ms=run_ms, bare_ms=bare_ms, sandbox_calls=7,
        start_ms=bare_ms / 10, warm_run_ms=warm_run_ms, warm_borrowed=borrowed, warm_outcome="verified",
    )  # fmt: skip


def test_the_ratio_of_several_rounds_is_the_median_of_each_rounds_own():
    """Each round's run over its own bare sum, then the median: a slow round's bare side does not
    flatter another round's run. With two rounds the median is their mean; the least borrowed counts."""
    two = summary([_round(1500, 1000, 1100, 6, [10, 30]), _round(3000, 1500, 1800, 5, [20, 40])])
    assert two.rounds == 2 and two.ratios == [1.5, 2.0] and two.run_over_bare == 1.75
    assert two.run_ms == 2250 and two.bare_ms == 1250  # the medians of each side alone
    assert two.warm_ratios == [1.1, 1.2] and two.warm_run_over_bare == 1.15 and two.warm_borrowed == 5
    assert two.overhead_ms_per_step == 25 and two.overhead_ms_p90 == 30  # over every step of every round
    assert two.floor_over_bare == 1.1
    three = summary([_round(1500, 1000, 0, 0, [1]), _round(9000, 1000, 0, 0, [1]), _round(1200, 1000, 0, 0, [1])])
    assert three.ratios == [1.5, 9.0, 1.2] and three.run_over_bare == 1.5, "one outlier round moves nothing"
    assert three.warm_run_over_bare is None and three.warm_ratios == [] and three.warm_borrowed == 0
