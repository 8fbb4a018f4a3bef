import pytest

pytestmark = [pytest.mark.docker, pytest.mark.timeout(300)]


def test_bench_run_reports_the_ratios_as_json(harness):
    ran = harness("bench", "run", "--json")
    assert ran.code == 0, ran.stderr
    figures = ran.json()
    assert figures["outcome"] == "verified" and figures["steps"] == 5 and figures["sandbox_calls"] == 6
    assert figures["overhead_ms_per_step"] > 0 and figures["bare_ms"] > 0
    assert figures["run_over_bare"] == pytest.approx(figures["run_ms"] / figures["bare_ms"], rel=0.01)
