"""The start-up benches on the real engine, small: `bench commands` (its own session and batch, each read
command timed against both floors), `bench sandbox --burst` (every pattern, both sides, percentiles and
success rates), `bench sandbox --tti` (time to interactive, four sides) and `bench startup` (the warm and cold one-shot beside `docker run` and `docker exec`, the cold one
beside its floor: a Python process making the call with the Docker SDK).
Figures are machine noise here; what is checked is that each side ran, succeeded and is reported."""

from __future__ import annotations

import json
import os

import pytest

from tests.cli_process import run_cli

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(400)]


def _bench(*args: str, label: str, tmp_path) -> dict:
    env = {**os.environ, "HARNESS_RUN_ID": label, "HARNESS_WARM_DIR": str(tmp_path / "warm")}
    done = run_cli(["bench", *args, "--json"], env=env, timeout=380)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def test_bench_commands_times_every_read_command_on_a_real_session_and_batch(tmp_path, run_label, docker_client):
    result = _bench("commands", "--rounds", "3", label=run_label, tmp_path=tmp_path)
    assert [row["command"] for row in result["commands"]] == [
        "--help",
        "--version",
        "session list",
        "show SESSION",
        "diff SESSION",
        "export SESSION",
        "report BATCH",
    ]
    assert result["bare"]["median_ms"] > 0 and result["typer_app"]["median_ms"] > 0
    for row in result["commands"]:
        assert row["latency"]["median_ms"] > 0
        assert row["over_bare"] == pytest.approx(row["latency"]["median_ms"] / result["bare"]["median_ms"], abs=0.01)
    left = docker_client.containers.list(all=True, filters={"label": f"harness.run={run_label}"})
    assert left == [], "the fixture's runs leave no container"


def test_bench_burst_reports_percentiles_and_success_for_every_pattern_on_both_sides(
    tmp_path, run_label, docker_client
):
    result = _bench(
        "sandbox", "--burst", "3", "--rounds", "1", "--stagger-ms", "50", label=run_label, tmp_path=tmp_path
    )
    assert result["n"] == 3 and [p["pattern"] for p in result["patterns"]] == ["sequential", "staggered", "burst"]
    for pattern in result["patterns"]:
        for side in ("harness", "docker_run"):
            figures = pattern[side]
            assert (figures["launches"], figures["succeeded"], figures["success_rate"]) == (3, 3, 1.0), figures
            assert 0 < figures["p50_ms"] <= figures["p95_ms"] <= figures["p99_ms"] <= figures["max_ms"]
    burst = result["patterns"][-1]
    assert result["p99_over_docker_run_p50"] == burst["p99_over_docker_run_p50"] > 0
    left = docker_client.containers.list(all=True, filters={"label": f"harness.run={run_label}"})
    assert left == [], "the bench's warm service and docker runs leave no container"


def test_bench_tti_gives_every_side_s_percentiles_and_success_as_the_field_publishes_them(
    tmp_path, run_label, docker_client
):
    """More sandboxes than the pooled path keeps ready (3): the rest are served by the refill, none fail;
    the JSON carries harness, harness_exec (warm and cold) and docker_run with p50, p95, p99 and success."""
    result = _bench("sandbox", "--tti", "staggered", "--n", "4", "--interval-ms", "50", label=run_label,
                    tmp_path=tmp_path)  # fmt: skip
    assert (result["pattern"], result["n"], result["pool_size"], result["command"]) == (
        "staggered", 4, 3, ["python3", "-V"]
    )  # fmt: skip
    for side in ("harness", "harness_exec", "harness_exec_cold", "docker_run"):
        figures = result[side]
        assert (figures["launches"], figures["succeeded"], figures["success"]) == (4, 4, 1.0), (side, figures)
        assert 0 < figures["p50"] <= figures["p95"] <= figures["p99"] <= figures["max"], (side, figures)
    assert result["harness_p99_over_docker_run_p50"] == pytest.approx(
        result["harness"]["p99"] / result["docker_run"]["p50"], abs=0.01
    )
    wrong = run_cli(["bench", "sandbox", "--tti", "all-at-once"], env={**os.environ, "HARNESS_RUN_ID": run_label})
    assert wrong.returncode == 64 and "one of sequential, staggered, burst" in wrong.stderr
    left = docker_client.containers.list(all=True, filters={"label": f"harness.run={run_label}"})
    assert left == [], "the pool, the warm service and the docker runs leave no container"


def test_bench_startup_compares_the_one_shot_with_docker_run_and_docker_exec(tmp_path, run_label, docker_client):
    result = _bench("startup", "--rounds", "3", label=run_label, tmp_path=tmp_path)
    for side in ("help", "exec", "cold_exec", "docker_run", "docker_exec", "sdk_floor"):
        assert result[side]["median_ms"] > 0, side
    assert result["exec_over_docker_exec"] == pytest.approx(
        result["exec"]["median_ms"] / result["docker_exec"]["median_ms"], abs=0.01
    )
    assert result["cold_exec_over_sdk_floor"] == pytest.approx(
        result["cold_exec"]["median_ms"] / result["sdk_floor"]["median_ms"], abs=0.01
    )
    left = docker_client.containers.list(all=True, filters={"label": f"harness.run={run_label}"})
    assert left == [], "the live container and the warm service's are gone"


def test_bench_hooks_measures_a_hooks_memory_and_hold_on_real_runs(tmp_path, run_label, docker_client):
    result = _bench("hooks", "--rounds", "1", label=run_label, tmp_path=tmp_path)
    assert result["quiet_peak_mb"] > 0 and result["loud_peak_mb"] > 0
    assert result["peak_over_quiet_mb"] <= 20, result  # 1 GB read in pieces: the controller stays flat
    assert result["daemon_hold_s"] <= result["hold_bound_s"] and result["timeout_hold_s"] <= result["hold_bound_s"]


def test_bench_agents_times_a_hosted_agent_s_commands_both_ways_and_its_start_up(tmp_path, run_label, docker_client):
    result = _bench("agents", "--calls", "3", "--rounds", "1", label=run_label, tmp_path=tmp_path)
    assert result["agent"] == "claude-code" and set(result["commands"]) == {"true", "python"}
    for side in result["commands"].values():
        assert side["harness_ms"] > 0 and side["own_ms"] > 0 and side["ratio"] > 0
        assert 0 < side["harness_share_ms"] < side["harness_ms"] and side["own_share_ms"] < side["own_ms"]
    assert 0 < result["startup_ms"] <= result["startup_max_ms"]


def test_bench_rollouts_runs_episodes_at_each_level_and_compares_a_step_with_the_loops(
    tmp_path, run_label, docker_client
):
    result = _bench("rollouts", "--steps", "2", "--at-once", "1", "--at-once", "2", label=run_label, tmp_path=tmp_path)
    assert [(level["at_once"], level["episodes"], level["rewarded"]) for level in result["levels"]] == [
        (1, 1, 1),
        (2, 2, 2),
    ]
    assert all(level["per_minute"] > 0 for level in result["levels"])
    assert result["episode_step"]["median_ms"] > 0 and result["loop_step"]["median_ms"] > 0
    assert result["episode_over_loop"] == pytest.approx(
        result["episode_step"]["median_ms"] / result["loop_step"]["median_ms"], abs=0.01
    )
