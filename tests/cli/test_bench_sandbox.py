"""`harness bench sandbox` on the real engine, small: the pooled call, a cold start, an exec into a live
container and the pooled call as on an engine elsewhere (the workspace as archives), and with `--engine`
the whole bench again on another engine, side by side. Apart from the other benches so it runs beside
them (one file per worker at a time). Figures are machine noise here; what is checked is that each side
ran and is reported, and that nothing is left."""

from __future__ import annotations

import pytest

from tests.cli.test_benches import _bench

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(400)]


def test_bench_sandbox_measures_the_archive_transport_beside_the_pooled_call(tmp_path, run_label, docker_client):
    """(d): the pooled call as it runs on an engine on another machine (the workspace as archives),
    beside (a) to (c) in the same run, for the small workspace and the example repository."""
    socket = "unix:///var/run/docker.sock"  # the same engine again, as another (Podman's, say) would be
    both = _bench(
        "sandbox", "--calls", "3", "--tree-files", "20", "--engine", socket, label=run_label, tmp_path=tmp_path
    )
    assert [row["engine"].split(" ")[0] for row in both] == ["Docker", "Docker"], both
    assert both[1]["engine"].endswith(" at http+docker://localhost") and " rootful " in both[1]["engine"]
    result = both[0]
    sides = ("archive_example_whole", "archive_large", "archive_large_whole")  # filled ahead, and not
    for side in ("pooled", "cold", "exec", "archive", "archive_example", *sides):
        assert result[side]["median_ms"] > 0 and both[1][side]["median_ms"] > 0, side
    assert result["archive_over_pooled"] == pytest.approx(result["archive_ms"] / result["pooled_ms"], abs=0.01)
    assert result["archive_over_exec"] == pytest.approx(result["archive_ms"] / result["exec_ms"], abs=0.01)
    large = result["archive_large"]["median_ms"] / result["archive_large_whole"]["median_ms"]
    assert result["filled_over_whole_large"] == pytest.approx(large, abs=0.01)
    left = docker_client.containers.list(all=True, filters={"label": f"harness.run={run_label}"})
    assert left == [], "the bench's containers are gone"
    assert docker_client.volumes.list(filters={"label": f"harness.run={run_label}"}) == [], "and their volumes"


def test_bench_create_rate_says_where_the_engines_rate_stops_growing(tmp_path, run_label, docker_client):
    result = _bench("sandbox", "--create-rate", label=run_label, tmp_path=tmp_path)
    assert [level["at_once"] for level in result["levels"]] == [1, 2, 4, 8]
    for level in result["levels"]:
        assert level["started"] >= 8 and level["harness_per_s"] > 0 and level["engine_per_s"] > 0
    best = max(level["engine_per_s"] for level in result["levels"])
    on = [level for level in result["levels"] if level["engine_per_s"] >= 0.9 * best]
    assert result["engine_plateau"] == min(level["at_once"] for level in on)
    assert result["pool_starters"] >= 2
    left = docker_client.containers.list(all=True, filters={"label": f"harness.run={run_label}"})
    assert [c.name for c in left if c.attrs["Config"]["Cmd"] == ["sleep", "300"]] == [], "the bare side's went too"
