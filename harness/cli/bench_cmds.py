"""Every `harness bench ...` command: each prints figures measured side by side in one run.

The measuring lives in `harness.bench`; this module parses flags and renders.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from harness.cli import environment
from harness.cli.app import ExitCode, bench_app, console, err_console, fail, reported


def _client() -> Any:
    from harness.assembly import engine

    return engine.connect(environment.docker_host())


@bench_app.command("sandbox")
def bench_sandbox(
    calls: int = typer.Option(20, min=3, max=1000, help="Timed calls per approach."),
    image: str = typer.Option("py311", help="Image to measure on."),
    tree_files: int = typer.Option(
        2000, "--tree-files", min=10, max=100_000, help="Files (8 KiB each) of the archive side's larger tree."
    ),
    burst: int | None = typer.Option(
        None,
        "--burst",
        min=2,
        max=32,
        help="Instead: N sandboxes asked for at once (and sequentially, and staggered), time to a first "
        "command's output, percentiles beside docker run's.",
    ),
    tti: str | None = typer.Option(
        None,
        "--tti",
        metavar="PATTERN",
        help="Instead: time to interactive of --n sandboxes arriving sequential, staggered or burst: harness's "
        "pooled call, its one-shot exec (warm and cold) and docker run, percentiles and success rates.",
    ),
    create_rate: bool = typer.Option(
        False,
        "--create-rate",
        help="Instead: containers started a second at 1, 2, 4 and 8 at once, harness's and the engine's own, "
        "and where the engine's rate stops growing.",
    ),
    n: int = typer.Option(100, "--n", min=1, max=500, help="With --tti: how many sandboxes."),
    interval_ms: float = typer.Option(200.0, "--interval-ms", min=0, help="With --tti staggered: the gap."),
    rounds: int = typer.Option(2, "--rounds", min=1, max=20, help="With --burst: rounds of each pattern."),
    stagger_ms: float = typer.Option(100.0, "--stagger-ms", min=0, help="With --burst: the staggered pattern's gap."),
    engines: list[str] = typer.Option(
        [],
        "--engine",
        help="Also measure the engine at this address (DOCKER_HOST's form, e.g. Podman's "
        "unix:///run/podman/podman.sock), after the default one, and print them side by side (repeatable).",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Pooled single-use call vs cold create/start/wait/remove vs exec into a long-lived container, and
    the pooled call as on an engine elsewhere (workspace as archives); with --engine, other engines
    beside the default one; with --burst N, start-up under load: percentiles and success rates beside
    docker run."""
    if create_rate:
        _bench_create_rate(image, as_json)
        return
    if tti is not None:
        _bench_tti(image, tti, n, interval_ms, as_json)
        return
    if burst is not None:
        _bench_burst(image, burst, rounds, stagger_ms, as_json)
        return
    from rich.table import Table

    from harness.assembly import engine
    from harness.bench.sandbox import LARGE_FILE_BYTES, measure

    run_id = environment.run_id("bench")
    with reported():
        result = measure(_client(), run_id=run_id, image=image, calls=calls, tree_files=tree_files)
        others = [
            measure(engine.connect(address), run_id=run_id, image=image, calls=calls, tree_files=tree_files)
            for address in engines
        ]
    if as_json:
        print(result.model_dump_json() if not engines else json.dumps([r.model_dump() for r in [result, *others]]))
        return
    if others:
        _engines_side_by_side([result, *others])
    table = Table("approach", "median ms", "p90 ms", title=f"{calls} calls of `true` on {result.image}")
    table.add_row("(a) pooled single-use call", f"{result.pooled.median_ms:.1f}", f"{result.pooled.p90_ms:.1f}")
    table.add_row("(b) cold create/start/wait/remove", f"{result.cold.median_ms:.1f}", f"{result.cold.p90_ms:.1f}")
    table.add_row("(c) exec into a long-lived container", f"{result.exec.median_ms:.1f}", f"{result.exec.p90_ms:.1f}")
    table.add_row(
        "(d) (a) as on an engine elsewhere: workspace as archives",
        f"{result.archive.median_ms:.1f}",
        f"{result.archive.p90_ms:.1f}",
    )
    for label, measured in (
        ("    (d) with the example repository", result.archive_example),
        ("        its container not filled ahead (the whole workspace at the call)", result.archive_example_whole),
        (
            f"    (d) with a tree of {tree_files:,} files ({tree_files * LARGE_FILE_BYTES / 2**20:.1f} MiB)",
            result.archive_large,
        ),
        ("        its container not filled ahead", result.archive_large_whole),
    ):
        table.add_row(label, f"{measured.median_ms:.1f}", f"{measured.p90_ms:.1f}")
    console.print(table)
    console.print(
        f"a/c = {result.pooled_over_exec:.2f} (target <= 0.25)   a/b = {result.pooled_over_cold:.2f} "
        f"(target <= 0.5)   calls by: {result.call_path}"
    )
    console.print(
        f"an engine on another machine: d/a = {result.archive_over_pooled:.2f}, d/c = {result.archive_over_exec:.2f}; "
        f"filled ahead / not: example {result.filled_over_whole_example:.2f}, {tree_files:,} files "
        f"{result.filled_over_whole_large:.2f} (what changed goes at the call, the working folder comes back whole)"
    )
    console.print(
        f"engine: {result.starts_per_s:.1f} container starts/s at the pool's concurrency; back-to-back calls "
        f"sustain {result.sustained_calls_per_s:.1f}/s (the refill is the ceiling, not the call)"
    )
    console.print(f"[dim]{result.note}[/]")


def _engines_side_by_side(results: list[Any]) -> None:
    from rich.table import Table

    first = results[0]
    table = Table(title=f"each engine, {first.calls} calls of `true` (medians, ms)")
    for column in ("engine", "(a) pooled", "(b) cold", "(c) exec", "(d) archives", "a/c", "d/c", "a / first's a"):
        table.add_column(column, justify="left" if column == "engine" else "right")
    for row in results:
        table.add_row(
            row.engine.split(" at ")[0],
            f"{row.pooled_ms:.1f}",
            f"{row.cold_ms:.1f}",
            f"{row.exec_ms:.1f}",
            f"{row.archive_ms:.1f}",
            f"{row.pooled_over_exec:.2f}",
            f"{row.archive_over_exec:.2f}",
            f"{row.pooled_ms / first.pooled_ms:.2f}" if first.pooled_ms else "-",
        )
    console.print(table)


def _bench_create_rate(image: str, as_json: bool) -> None:
    from rich.table import Table

    from harness.assembly import engine
    from harness.bench.create_rate import measure

    with reported():
        client = _client()
        result = measure(
            client, image=image, image_ref=engine.image_ref(client, image), run_id=environment.run_id("bench")
        )
    if as_json:
        print(result.model_dump_json())
        return
    table = Table("at once", "started", "harness starts/s", "engine starts/s")
    for level in result.levels:
        table.add_row(str(level.at_once), str(level.started), f"{level.harness_per_s:.2f}", f"{level.engine_per_s:.2f}")
    console.print(table)
    console.print(
        f"the engine's create rate stops growing at {result.engine_plateau} at once (harness's starts at "
        f"{result.harness_plateau}); the warm pool starts {result.pool_starters} at once here",
        soft_wrap=True,
    )


def _bench_tti(image: str, pattern: str, n: int, interval_ms: float, as_json: bool) -> None:
    from rich.table import Table

    from harness.assembly import engine
    from harness.assembly.runs import POOL_SIZE
    from harness.bench.tti import PATTERNS, measure

    if pattern not in PATTERNS:
        fail(f"--tti {pattern!r}: one of {', '.join(PATTERNS)}", ExitCode.USAGE)
    with reported():
        client = _client()
        ref = engine.image_ref(client, image)
        result = measure(
            client, image=image, image_ref=ref, run_id=environment.run_id("bench"), pool_size=POOL_SIZE,
            pattern=pattern, n=n, interval_ms=interval_ms,
        )  # fmt: skip
    if as_json:
        print(result.model_dump_json())
        return
    gap = f", one every {interval_ms:g} ms" if pattern == "staggered" else ""
    table = Table(title=f"time to interactive: {n} sandboxes, {pattern}{gap}, `{' '.join(result.command)}` on {ref}")
    for column in ("side", "ok", "success", "p50 ms", "p95 ms", "p99 ms", "max ms"):
        table.add_column(column, justify="left" if column == "side" else "right")
    sides = (
        (f"harness (pooled call, pool {result.pool_size})", result.harness),
        (f"harness exec (warm service, {result.warm_per_spec} ready)", result.harness_exec),
        ("harness exec (cold)", result.harness_exec_cold),
        ("docker run", result.docker_run),
    )
    for name, figures in sides:
        table.add_row(
            name, f"{figures.succeeded}/{figures.launches}", f"{figures.success:.0%}", f"{figures.p50:.0f}",
            f"{figures.p95:.0f}", f"{figures.p99:.0f}", f"{figures.max:.0f}",
        )  # fmt: skip
    console.print(table)
    for name, figures in sides:
        for failure in figures.failures:
            console.print(f"{name} failed: {failure}", markup=False, soft_wrap=True)
    console.print(
        f"harness p99 / docker run p50 = {result.harness_p99_over_docker_run_p50:.2f} (target <= 1 under a burst of 100)"
    )


def _bench_burst(image: str, n: int, rounds: int, stagger_ms: float, as_json: bool) -> None:
    from rich.table import Table

    from harness.assembly.engine import image_ref
    from harness.bench.burst import measure

    with reported():
        ref = image_ref(environment.docker_host(), image)
        result = measure(
            image=image, image_ref=ref, run_id=environment.run_id("bench"), n=n, rounds=rounds, stagger_ms=stagger_ms
        )
    if as_json:
        print(result.model_dump_json())
        return
    table = Table(
        title=f"time to a first command's output, {n} sandboxes x {rounds} rounds per pattern, on {result.image}"
    )
    for column in ("pattern", "side", "ok", "p50 ms", "p95 ms", "p99 ms", "max ms"):
        table.add_column(column, justify="left" if column in ("pattern", "side") else "right")
    for row in result.patterns:
        for side, figures in (("harness exec", row.harness), ("docker run", row.docker_run)):
            table.add_row(
                row.pattern if side == "harness exec" else "",
                side,
                f"{figures.succeeded}/{figures.launches}",
                f"{figures.p50_ms:.0f}",
                f"{figures.p95_ms:.0f}",
                f"{figures.p99_ms:.0f}",
                f"{figures.max_ms:.0f}",
            )
    console.print(table)
    for row in result.patterns:
        for side, figures in (("harness exec", row.harness), ("docker run", row.docker_run)):
            for failure in figures.failures:
                console.print(f"{row.pattern}, {side} failed: {failure}", markup=False)
    console.print(f"burst: harness p99 / docker run p50 = {result.p99_over_docker_run_p50:.2f} (target <= 1 at N = 20)")


@bench_app.command("net")
def bench_net(
    rounds: int = typer.Option(9, "--rounds", min=3, max=100, help="Downloads per side."),
    image: str = typer.Option("py311", help="Image to measure in."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """A 20 MB download through a session's egress proxy vs straight from the same local server, and
    what the proxy adds to one small request."""
    from rich.table import Table

    from harness.bench.net import measure

    with reported():
        result = measure(_client(), image=image, rounds=rounds)
    if as_json:
        print(result.model_dump_json())
        return
    table = Table(
        "measure",
        "direct",
        "through the proxy",
        "the hops alone",
        title=f"{result.megabytes} MB, {rounds} rounds per side",
    )
    table.add_row("download (median ms)", f"{result.direct_ms:.1f}", f"{result.proxy_ms:.1f}", f"{result.hops_ms:.1f}")
    table.add_row("small request (median ms)", f"{result.small_direct_ms:.2f}", f"{result.small_proxy_ms:.2f}", "-")
    console.print(table)
    console.print(
        f"proxy/direct = {result.proxy_over_direct:.2f} (target <= 1.3)   hops alone/direct = "
        f"{result.hops_over_direct:.2f} (the bound of the route here)   proxy/hops = {result.proxy_over_hops:.2f}   "
        f"a small request +{result.small_added_ms:.2f} ms   load {result.load_1m}"
    )


@bench_app.command("snapshot")
def bench_snapshot(
    files: int = typer.Option(10_000, min=100, help="Files in the generated repository."),
    steps: int = typer.Option(15, min=3, help="One-file-change steps measured."),
    big: int = typer.Option(100_000, min=1000, help="Files in the scale case."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Snapshot and rollback cost per step, incremental vs full, and 100k vs 10k files."""
    from rich.markup import escape
    from rich.table import Table

    from harness.bench import snapshot as snapshot_bench

    result = snapshot_bench.run(
        files=files, steps=steps, big_files=big, log=lambda line: err_console.print(f"[dim]{escape(line)}[/]")
    )
    if as_json:
        print(result.model_dump_json())
        return
    table = Table(
        "measure", "value", "target", title=f"{result.files} files, {result.megabytes} MB, {result.steps} steps"
    )
    table.add_row("first full snapshot", f"{result.full_snapshot_ms:.0f} ms", "")
    table.add_row("one-change snapshot (median)", f"{result.snapshot_ms:.1f} ms", "<= 100 ms")
    table.add_row("session step: snapshot + record (median)", f"{result.step_ms:.1f} ms", "")
    table.add_row("rollback one step (median)", f"{result.rollback_ms:.1f} ms", "<= 100 ms")
    table.add_row("one-change snapshot, stat walk (fresh process)", f"{result.walk_snapshot_ms:.0f} ms", "")
    table.add_row("incremental / full", f"{result.incremental_over_full:.3f}", "<= 0.2")
    table.add_row(f"{big} files / {files} files (one change)", f"{result.scale_100k_over_10k:.2f}", "<= 3")
    console.print(table)


@bench_app.command("tools")
def bench_tools(
    json_out: bool = typer.Option(False, "--json", help="Print one JSON object."),
    rounds: int = typer.Option(25, "--rounds", min=5, max=500, help="Measurements per side."),
    image: str = typer.Option("py311", "--image", help="Sandbox image for both sides."),
) -> None:
    """Median read_file (registry + gate + warm DockerSandbox) vs a bare exec_run of cat, same run."""
    from harness.bench.tools import measure

    with reported():
        figures = measure(_client(), image=image, rounds=rounds)
    if json_out:
        print(json.dumps(figures))
        return
    console.print(f"read_file end to end: {figures['read_file_ms']:.1f} ms median over {rounds} calls")
    console.print(f"bare exec_run cat:    {figures['exec_cat_ms']:.1f} ms median over {rounds} calls")
    verdict = "ok" if figures["read_file_over_exec"] <= 0.5 else "over the 0.5x target"
    console.print(f"ratio:                {figures['read_file_over_exec']:.2f}x ({verdict})")


@bench_app.command("provider")
def bench_provider_cmd(
    repeats: int = typer.Option(50, "--repeats", min=3, help="Turns per measurement."),
    chunks: int = typer.Option(200, "--chunks", min=20, help="Streamed chunks per turn."),
    as_json: bool = typer.Option(False, "--json", help="Print the figures as JSON."),
) -> None:
    """Provider overhead (assembly + validation, no network) for a streamed turn with two tool calls."""
    from harness.bench.provider import bench_provider

    results = [bench_provider(kind, chunks=chunks, repeats=repeats) for kind in ("openai", "anthropic")]
    if as_json:
        console.print(json.dumps([r.model_dump() for r in results], indent=2))
        return
    for r in results:
        console.print(
            f"{r.provider:9} {r.chunks} chunks: complete {r.complete_ms:.2f} ms/turn ({r.complete_us_per_chunk:.1f} us/chunk), "
            f"SDK alone {r.sdk_only_ms:.2f} ms; our overhead {r.overhead_ms:.3f} ms/turn "
            f"({r.overhead_us_per_chunk:.2f} us/chunk), ratio complete/SDK {r.ratio:.2f}x; "
            f"assembly+validation alone {r.assembly_ms:.3f} ms/turn ({r.assembly_us_per_chunk:.2f} us/chunk)",
            soft_wrap=True,
        )


@bench_app.command("run")
def bench_run(
    rounds: int = typer.Option(3, "--rounds", min=1, max=50, help="Run/bare pairs; the median is reported."),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Controller overhead per step and the whole example run against bare exec, side by side."""
    from harness.bench.run import measure
    from harness.config import RunConfig

    with reported():
        result = measure(environment.runtime(RunConfig(), prefix="bench"), rounds=rounds)
    if json_out:
        print(result.model_dump_json(indent=2))
        return
    console.print(f"example run: {result.outcome} in {result.steps} steps, {result.sandbox_calls} sandbox calls")
    console.print(
        f"controller overhead per step: median {result.overhead_ms_per_step} ms, "
        f"p90 {result.overhead_ms_p90} ms (target ≤ 150 ms)"
    )
    console.print(
        f"without a warm service: whole run {result.run_ms:.0f} ms vs the same commands by exec in one "
        f"container {result.bare_ms:.0f} ms (medians of {result.rounds} rounds): run_over_bare = "
        f"{result.run_over_bare} (rounds: {', '.join(map(str, result.ratios))})"
    )
    console.print(
        f"one container start {result.start_ms:.0f} ms: a run that waits for one cannot go below "
        f"(bare + start) / bare = {result.floor_over_bare} here"
    )
    if result.warm_run_over_bare is None:
        console.print("with a warm service: it could not start here")
        return
    console.print(
        f"with a warm service lending the session {result.warm_borrowed} containers started before it "
        f"({result.warm_outcome}): "
        f"whole run {result.warm_run_ms:.0f} ms, warm_run_over_bare = {result.warm_run_over_bare} "
        f"(target ≤ 1.3; rounds: {', '.join(map(str, result.warm_ratios))})"
    )


@bench_app.command("startup")
def bench_startup(
    rounds: int = typer.Option(10, "--rounds", min=3, max=200, help="Fresh processes per side."),
    image: str = typer.Option("py311", "--image", help="Image of the one-shot exec and the bare docker run."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """`harness --help` vs a bare typer import, and a one-shot `harness exec` vs `docker run --rm`."""
    from harness.assembly.engine import image_ref
    from harness.bench.startup import measure

    with reported():
        ref = image_ref(environment.docker_host(), image)
        result = measure(image_ref=ref, run_id=environment.run_id("bench"), rounds=rounds)
    if as_json:
        print(result.model_dump_json())
        return
    console.print(
        f"harness --help {result.help.median_ms:.0f} ms vs python -c 'import typer' {result.bare_typer.median_ms:.0f} ms:"
        f" {result.help_over_typer:.2f}x (target <= 2)"
    )
    if result.exec is None or result.docker_run is None:
        console.print("one-shot exec: no docker CLI to compare with")
        return
    console.print(
        f"harness exec PATH -- true {result.exec.median_ms:.0f} ms (warm service) vs docker run --rm --network none "
        f"{result.docker_run.median_ms:.0f} ms: {result.exec_over_docker_run:.2f}x (target <= 0.3)"
    )
    if result.docker_exec is not None:
        console.print(
            f"  vs docker exec into a live container {result.docker_exec.median_ms:.0f} ms: "
            f"{result.exec_over_docker_exec:.2f}x (target <= 0.6)"
        )
    if result.cold_exec is not None:
        console.print(
            f"without a warm service {result.cold_exec.median_ms:.0f} ms: {result.cold_exec_over_docker_run:.2f}x "
            "docker run (target <= 1.5)"
        )
    if result.sdk_floor is not None and result.cold_exec is not None:
        console.print(
            f"  its floor, a Python process making the call with the Docker SDK: {result.sdk_floor.median_ms:.0f} ms, "
            f"{result.sdk_floor_over_docker_run:.2f}x docker run; harness's own share "
            f"{result.cold_exec_over_sdk_floor:.2f}x the floor"
        )


@bench_app.command("context")
def bench_context(as_json: bool = typer.Option(False, "--json", help="Print one JSON object.")) -> None:
    """A long task (30 files, ~150k tokens) under a 32k budget: with the context tiers vs the naive loop."""
    from harness.bench.context import measure
    from harness.config import RunConfig

    with reported():
        result = measure(environment.runtime(RunConfig(), prefix="bench"))
    if as_json:
        print(result.model_dump_json())
        return
    console.print(f"{result.files} files, ~{result.content_tokens} tokens of content, budget {result.budget_tokens}")
    for run in (result.tiers, result.naive_same_budget, result.naive_same_steps):
        console.print(
            f"{run.mode:<28} {run.outcome:<14} {run.steps:>3} steps  {run.input_tokens:>9} input tokens  "
            f"{run.folds} folds  {run.summaries} summaries (~{run.summary_input_tokens} tokens, ${run.summary_cost_usd:.4f})",
            soft_wrap=True,
        )
    verdict = "ok" if result.tiers_over_naive <= 0.4 else "over the 0.4 target"
    console.print(f"input tokens, tiers / naive run to the same step: {result.tiers_over_naive:.3f} ({verdict})")


@bench_app.command("batch")
def bench_batch(
    tasks: int | None = typer.Option(
        None, "--tasks", min=2, max=500, help="Scripted tasks in the batch [default: 24; 50 with --disk]."
    ),
    think: float = typer.Option(1.0, "--think", min=0, max=30, help="Seconds the model thinks per turn."),
    workers: list[int] = typer.Option([1, 4, 8], "--workers", min=1, max=64, help="Worker counts (repeatable)."),
    image: str = typer.Option("py311", "--image", help="Image of the tasks and of the bare engine runs."),
    disk: bool = typer.Option(
        False, "--disk", help="Measure disk instead: --tasks task-runs of a generated repository."
    ),
    repo_mb: int = typer.Option(50, "--repo-mb", min=1, max=2000, help="With --disk: the repository's size in MB."),
    auto: bool = typer.Option(
        False, "--auto", help="Also run the batch with --workers auto, and compare it with the best fixed count."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Batch speedup over one worker, memory per concurrent session, container starts/s vs the
    engine's; with --auto, adaptive concurrency vs the best fixed count; with --disk, the disk a batch
    leaves over its repository's size."""
    from harness.assembly.engine import image_ref
    from harness.bench.batch import measure

    if disk:
        _bench_disk(tasks or 50, min(workers), repo_mb, as_json)
        return
    with reported():
        client = _client()
        ref = image_ref(client, image)
        result = measure(
            client,
            ref,
            run_id=environment.run_id("bench"),
            docker_host=environment.docker_host(),
            tasks=tasks or 24,
            think_s=think,
            workers=tuple(sorted(set(workers))),
            auto=auto,
        )
    if as_json:
        print(result.model_dump_json())
        return
    for run in result.runs:
        console.print(
            (f"auto (at most {run.workers}, limits {run.limits})" if run.auto else f"{run.workers} worker(s)")
            + f": {run.seconds:.1f} s, {run.verified}/{result.tasks} verified, "
            f"peak {run.peak_mb:.0f} MB RSS ({run.mb_per_session:.0f} MB per session), "
            f"{run.peak_pss_mb:.0f} MB PSS ({run.pss_mb_per_session:.0f} per session), "
            f"{run.container_starts} container starts ({run.starts_per_s:.1f}/s), "
            f"cores {run.cpu_busy:.0%} busy"
        )
    fixed = [run for run in result.runs if not run.auto]
    console.print(
        f"speedup {fixed[-1].workers} over {fixed[0].workers} worker(s): {result.speedup:.2f}x "
        f"(target at 8 over 1: >= 6; this machine's cores allow at most {result.cpu_bound_speedup:.2f}x); "
        f"engine ceiling {result.engine_starts_per_s:.1f} bare runs/s"
    )
    if result.auto_over_best is not None:
        console.print(f"auto over the best fixed count: {result.auto_over_best:.2f}x the throughput (target >= 0.9)")


def _bench_disk(tasks: int, workers: int, repo_mb: int, as_json: bool) -> None:
    from harness.bench.batch import measure_disk

    with reported():
        _client()  # the engine is there (one line when it is not)
        result = measure_disk(
            run_id=environment.run_id("bench"),
            docker_host=environment.docker_host(),
            tasks=tasks,
            workers=max(2, workers),
            megabytes=repo_mb,
        )
    if as_json:
        print(result.model_dump_json())
        return
    mb = 1024**2
    verdict = "ok" if result.disk_over_repo <= 2 else "over the 2 target"
    console.print(
        f"{result.tasks} task-runs ({result.verified} verified) of a {result.repo_bytes / mb:.1f} MB repository "
        f"with {result.workers} workers in {result.seconds:.0f} s"
    )
    console.print(
        f"batch directory after: {result.batch_bytes / mb:.1f} MB, {result.disk_over_repo:.2f}x the repository "
        f"({verdict}); at most {result.peak_bytes / mb:.1f} MB ({result.peak_over_repo:.2f}x) while it ran"
    )
    console.print(
        f"after `session rm` of all but one: {result.after_rm_bytes / mb:.1f} MB ({result.after_rm_over_repo:.2f}x; "
        f"{result.collected_mb:.1f} MB collected)"
    )


@bench_app.command("fork")
def bench_fork(
    files: int = typer.Option(10_000, "--files", min=10, max=200_000, help="Files of the generated repository."),
    forks: int = typer.Option(8, "--forks", min=1, max=100, help="Forks (and fresh sessions) to make."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Time and disk to make N forks of a session, against N fresh sessions of the same repository."""
    from harness.bench.fork import measure

    with reported():
        _client()
        result = measure(
            run_id=environment.run_id("bench"), docker_host=environment.docker_host(), files=files, forks=forks
        )
    if as_json:
        print(result.model_dump_json())
        return
    mb = 1024**2
    verdict = "ok" if result.disk_over_fresh <= 0.1 else "over the 0.1 target"
    console.print(
        f"{result.forks} forks of a session on {result.files} files ({result.repo_bytes / mb:.1f} MB): "
        f"{result.fork_s:.2f} s, {result.fork_bytes / mb:.2f} MB"
    )
    console.print(f"{result.forks} fresh sessions: {result.fresh_s:.2f} s, {result.fresh_bytes / mb:.1f} MB")
    console.print(
        f"disk forks/fresh {result.disk_over_fresh:.4f} ({verdict}), time {result.time_over_fresh:.3f}x; "
        f"a fork's workspace made from the store on first use: {result.first_workspace_s:.2f} s"
    )


@bench_app.command("integrations")
def bench_integrations(
    rounds: int = typer.Option(20, "--rounds", min=3, max=500, help="Timed calls per side."),
    image: str = typer.Option("py311", "--image", help="Image for every side."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Per-call latency of the mini-swe-agent environment and the Inspect sandbox vs what they replace."""
    from rich.table import Table

    from harness.bench.integrations import measure

    with reported():
        result = measure(image=image, rounds=rounds, run_id=environment.run_id("bench"))
    if as_json:
        print(result.model_dump_json())
        return
    table = Table("integration", "harness ms", "p90", "replaces", "its ms", "p90", "ratio")
    for name, pair in (("mini-swe-agent", result.mini_swe_agent), ("Inspect AI", result.inspect)):
        table.add_row(
            name,
            f"{pair.ours.median_ms:.1f}",
            f"{pair.ours.p90_ms:.1f}",
            pair.theirs_is,
            f"{pair.theirs.median_ms:.1f}",
            f"{pair.theirs.p90_ms:.1f}",
            f"{pair.ours_over_theirs:.2f}",
        )
    console.print(table)
    console.print(
        f"[dim]{rounds} rounds of `cat /etc/hostname` on {result.image}, interleaved (medians); load {result.load_1m}. "
        "DockerEnvironment: mini-swe-agent's own, `docker exec … bash -lc` into one live container. docker exec "
        "(live): what Inspect's docker sandbox runs beneath `docker compose exec`, a lower bound for it.[/]",
        soft_wrap=True,
    )


@bench_app.command("rollouts")
def bench_rollouts(
    steps: int = typer.Option(6, "--steps", min=1, max=100, help="run_command calls per episode, before the fix."),
    image: str = typer.Option("py311", "--image", help="Image of the example's episodes and loop runs."),
    at_once: list[int] = typer.Option(
        [], "--at-once", min=1, max=64, help="Episodes running at once, one level each (repeatable) [default: 1, 4, 8]."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Episodes of the example per minute through `harness env serve` at 1, 4 and 8 at once, and an
    episode's step against a step of harness's own loop (docs/rollouts.md)."""
    from rich.table import Table

    from harness.bench.rollouts import measure

    with reported():
        levels = tuple(at_once) or (1, 4, 8)
        result = measure(image=image, steps=steps, levels=levels, run_id=environment.run_id("bench"))
    if as_json:
        print(result.model_dump_json())
        return
    table = Table("at once", "episodes", "seconds", "episodes/min", "reward 1")
    for level in result.levels:
        table.add_row(str(level.at_once), str(level.episodes), f"{level.seconds:.1f}", f"{level.per_minute:.1f}",
                      f"{level.rewarded}/{level.episodes}")  # fmt: skip
    console.print(table)
    console.print(
        f"a step: episode {result.episode_step.median_ms:.0f} ms (p90 {result.episode_step.p90_ms:.0f}), harness's "
        f"own loop {result.loop_step.median_ms:.0f} ms (p90 {result.loop_step.p90_ms:.0f}): "
        f"{result.episode_over_loop:.2f}x; load {result.load_1m}",
        soft_wrap=True,
    )


@bench_app.command("mine")
def bench_mine(
    languages: list[str] = typer.Option(
        [], "--language", help="Built histories to mine: python, go, javascript, rust (repeatable) [default: all]."
    ),
    repos: list[Path] = typer.Option(
        [], "--repo", help="A repository of your own to mine and check too (working copy, bare or bundle; repeatable)."
    ),
    example: bool = typer.Option(True, "--example/--no-example", help="Mine the project's example history too."),
    workers: int = typer.Option(3, "--workers", min=1, max=64, help="Tasks checked at once."),
    build_envs: bool = typer.Option(
        False, "--build-envs", help="Build environments for declarations no image meets (tasks check --build-envs)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """The yield of `tasks mine` + `tasks check` per language: commits scanned, tasks made, sound, and
    rejected by reason, on built histories (merges, squashes, four languages), the example and --repo."""
    from harness.assembly import Runtime
    from harness.bench.histories import HISTORIES
    from harness.bench.mine import measure

    unknown = sorted(set(languages) - set(HISTORIES))
    if unknown:
        err_console.print(f"error: no built history for {', '.join(unknown)}; known: {', '.join(HISTORIES)}")
        raise typer.Exit(64)
    with reported():
        runtime = Runtime(run_id=environment.run_id("bench"), docker_host=environment.docker_host())
        log = (lambda text: None) if as_json else (lambda text: err_console.print(text, markup=False))
        result = measure(
            runtime,
            languages=languages or None,
            repos=repos,
            example=example,
            workers=workers,
            build_envs=build_envs,
            log=log,
        )
    if as_json:
        print(result.model_dump_json())
        return
    for repo in result.repositories:
        rejected = ", ".join(f"{kind} {count}" for kind, count in repo.rejected_by_kind.items()) or "none"
        console.print(
            f"{repo.name}: {repo.scanned} commit(s) scanned ({repo.merges} merges) in {repo.mine_ms:.0f} ms, "
            f"{repo.mined} task(s), {repo.sound} sound; rejected: {rejected}",
            soft_wrap=True,
            markup=False,
        )
    for language, row in result.by_language.items():
        target = f" (target >= {row['target']:.0%})" if "target" in row else ""
        console.print(
            f"  {language:<11} {row['sound']:.0f} of {row['checked']:.0f} sound: {row['sound_rate']:.0%}{target}",
            markup=False,
        )
    console.print(f"targets {'met' if result.targets_met else 'NOT met'}; {result.seconds:.0f} s", markup=False)


@bench_app.command("commands")
def bench_commands(
    rounds: int = typer.Option(10, "--rounds", min=3, max=200, help="Fresh processes per command."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """The read commands (--help, --version, session list, show, diff, export, report) vs the bare
    import of typer, rich and pydantic, and vs a one-command typer app (the floor of any typer CLI)."""
    from rich.table import Table

    from harness.bench.commands import measure

    with reported():
        result = measure(docker_host=environment.docker_host(), run_id=environment.run_id("bench"), rounds=rounds)
    if as_json:
        print(result.model_dump_json())
        return
    table = Table(title=f"read commands, fresh processes, medians of {result.rounds} rounds")
    for column in ("command", "median ms", "p90 ms", "/ bare import", "/ typer app"):
        table.add_column(column, justify="left" if column == "command" else "right")
    table.add_row(
        "python -c 'import typer, rich, pydantic'",
        f"{result.bare.median_ms:.0f}",
        f"{result.bare.p90_ms:.0f}",
        "1.00",
        "",
    )
    table.add_row(
        "a one-command typer app (the floor)",
        f"{result.typer_app.median_ms:.0f}",
        f"{result.typer_app.p90_ms:.0f}",
        f"{result.typer_app_over_bare:.2f}",
        "1.00",
    )
    for row in result.commands:
        table.add_row(
            f"harness {row.command}",
            f"{row.latency.median_ms:.0f}",
            f"{row.latency.p90_ms:.0f}",
            f"{row.over_bare:.2f}",
            f"{row.over_typer_app:.2f}",
        )
    console.print(table)
    console.print(
        f"target: each command <= 1.5x the bare import; a command through typer cannot go below the floor "
        f"({result.typer_app_over_bare:.2f}x): the read commands' plain forms run without it"
    )


@bench_app.command("setup")
def bench_setup(
    image: str = typer.Option("py311", "--image", help="The demo's image."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """What `make demo` sets up on a bare machine (the package in a fresh venv; the base, the sandbox
    layer and the image built from nothing) against bootstrapping the base plus installing the package."""
    from harness.bench.setup import measure

    with reported():
        try:
            result = measure(
                _client(),
                run_id=environment.run_id("bench"),
                image=image,
                log=lambda line: err_console.print(line, markup=False),
            )
        except RuntimeError as error:
            fail(str(error), ExitCode.SANDBOX)
    if as_json:
        print(result.model_dump_json())
        return
    console.print(
        f"make demo's set-up {result.demo_s:.0f} s: install {result.install_s:.0f} s + base {result.base_s:.0f} s + "
        f"sandbox layer {result.sandbox_s:.0f} s + {result.image} {result.image_s:.0f} s"
    )
    console.print(
        f"vs base + install {result.floor_s:.0f} s: {result.demo_over_floor:.2f}x (target <= 1.5)", markup=False
    )


@bench_app.command("hooks")
def bench_hooks(
    rounds: int = typer.Option(3, "--rounds", min=1, max=20, help="Runs of each memory side."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """A host hook's cost to the controller: peak memory under a hook printing 1 GB against a quiet one;
    how long a hook's leftover daemon, or a hook past its timeout, holds its call."""
    from harness.bench.hooks import measure

    with reported():
        _client()
        result = measure(environment.run_id("bench"), rounds=rounds)
    if as_json:
        print(result.model_dump_json())
        return
    memory = "ok" if result.peak_over_quiet_mb <= 20 else "over the 20 MB target"
    console.print(
        f"controller peak memory: hook printing 1 GB {result.loud_peak_mb:.1f} MB, quiet hook "
        f"{result.quiet_peak_mb:.1f} MB: +{result.peak_over_quiet_mb:.1f} MB ({memory})"
    )
    for label, held in (("a daemon left holding its pipes", result.daemon_hold_s),
                        ("a hook past its 2 s timeout, beside a daemon", result.timeout_hold_s)):  # fmt: skip
        verdict = "ok" if held <= result.hold_bound_s else f"over the {result.hold_bound_s:g} s target"
        console.print(f"{label}: held its call {held:.2f} s ({verdict})")


@bench_app.command("agents")
def bench_agents(
    calls: int = typer.Option(12, "--calls", min=3, max=200, help="Calls of each command in each run."),
    rounds: int = typer.Option(2, "--rounds", min=1, max=20, help="Runs of each side and command, interleaved."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """A hosted agent's shell command through harness's run_command (a fresh container each) against its
    own shell in its own container (target <= 1.2x, on `true` and on python3), and its start-up."""
    from rich.table import Table

    from harness.bench.agents import TARGET, measure

    with reported():
        _client()
        result = measure(environment.run_id("bench"), calls=calls, rounds=rounds)
    if as_json:
        print(result.model_dump_json())
        return
    table = Table(title=f"{result.agent}: one call, median ms ({result.calls} calls x {result.rounds} rounds)")
    for column in ("command", "harness's run_command", "its own shell", "ratio", "inside harness", "bound"):
        table.add_column(column)
    for label, side in result.commands.items():
        verdict = "ok" if side.ratio <= TARGET else f"over the {TARGET:g}x target"
        table.add_row(
            label, f"{side.harness_ms:.1f}", f"{side.own_ms:.1f}", f"{side.ratio:.2f}x ({verdict})",
            f"{side.harness_share_ms:.1f} / {side.own_share_ms:.1f}", f"{side.bound:.2f}x",
        )  # fmt: skip
    console.print(table)
    console.print(
        "inside harness: of each call, the time from the loop taking it to its record written (gate, container, "
        "record), harness's run_command / its own shell; the rest is the agent's own handling and the model's answer. "
        "bound: the ratio an instant call through the agent's MCP client would have (no work in harness goes under it)"
    )
    console.print(
        f"agent start-up (its container, ACP initialize, session/new): median {result.startup_ms:.0f} ms, "
        f"at most {result.startup_max_ms:.0f} ms"
    )
