"""`harness report DIR [DIR2 ...] [--format md|json] [-o FILE]`: the numbers of one or more batches."""

from __future__ import annotations

from pathlib import Path

import typer

from harness.cli.app import ExitCode, app, console, fail, reported


@app.command("report")
def report_command(
    dirs: list[Path] = typer.Argument(..., metavar="DIR...", help="Batch directories (several: side by side)."),
    fmt: str = typer.Option("md", "--format", help="md or json."),
    output: Path | None = typer.Option(None, "-o", "--output", help="Write here instead of printing."),
) -> None:
    """Completion, turns, first-tool accuracy, cost and long-context success, per model and category."""
    from harness.batch.records import BatchDir
    from harness.report.metrics import report
    from harness.report.render import as_json, as_markdown

    if fmt not in ("md", "json"):
        fail(f"--format must be md or json, not {fmt!r}", ExitCode.USAGE)
    with reported():
        reports = []
        for folder in dirs:
            if not (folder / "runs").is_dir():
                fail(f"{folder} is no batch directory (no runs/ in it)", ExitCode.NOT_FOUND)
            reports.append(report(BatchDir(folder).records(), source=str(folder)))
        text = as_json(reports) if fmt == "json" else as_markdown(reports)
    if output is None:
        console.out(text, highlight=False)
    else:
        output.write_text(text, encoding="utf-8")
        console.print(f"wrote {output}")
