"""`harness report DIR [DIR2 ...] [--format md|json|html] [-o FILE]`: the numbers of one or more
batches; `harness view SESSION|DIR`: the report and trajectory pages, written and opened, or served
on 127.0.0.1."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from harness.cli.app import ExitCode, app, console, err_console, fail, reported, state_dir
from sandbox.layout import SessionFolder

_FORMATS = ("md", "json", "html")


@app.command("report")
def report_command(
    dirs: list[Path] = typer.Argument(
        ..., metavar="DIR...", help="Batch directories or Harbor job directories (several: side by side)."
    ),
    fmt: str = typer.Option("md", "--format", help="md, json or html."),
    output: Path | None = typer.Option(
        None, "-o", "--output", help="Write here instead of printing (html: default DIR/report.html)."
    ),
) -> None:
    """Completion, turns, first-tool accuracy, cost and long-context success, per model and category;
    a Harbor job directory's trials beside harness's batches (each trial a task-run of `harbor:AGENT`)."""
    from harness.cli.terminal import write_visible
    from harness.report.render import check_source, text_report

    if fmt not in _FORMATS:
        fail(f"--format must be one of {', '.join(_FORMATS)}, not {fmt!r}", ExitCode.USAGE)
    with reported():
        if fmt == "html":  # (text_report checks its directories itself)
            from harness.report import pages

            for folder in dirs:
                check_source(folder)
            if output is None and len(dirs) > 1:
                fail("several batches in one html report need -o FILE", ExitCode.USAGE)
            written = pages.write_report(dirs, output) if output else pages.write_batch(dirs[0])
            console.print(f"wrote {written}", soft_wrap=True, markup=False)
            return
        text = text_report(dirs, fmt)
    if output is None:
        write_visible(text)
    else:
        output.write_text(text, encoding="utf-8")
        console.print(f"wrote {output}", soft_wrap=True, markup=False)


@app.command("view")
def view_command(
    target: str = typer.Argument(
        ..., metavar="SESSION|DIR", help="A session id, a session folder, or a batch directory."
    ),
    state: Path | None = typer.Option(
        None, "--state-dir", help="Where sessions live (default: $HARNESS_STATE_DIR or the per-user data dir)."
    ),
    serve: bool = typer.Option(False, "--serve", help="Serve the pages on 127.0.0.1 (re-read on every reload)."),
    port: int = typer.Option(0, "--port", min=0, max=65535, help="Port for --serve [default: any free one]."),
    open_browser: bool = typer.Option(True, "--open/--no-open", help="Open the page in a browser."),
) -> None:
    """Every step of a session (model text, calls, gate, envelope, diff, verify rounds, final patch),
    a batch's report with a page per task-run, or any ATIF trajectory (FILE.json, from Harbor or
    another agent) as the same page (FILE.html beside it)."""
    from harness.report import atif, pages

    if target.endswith(".json") and Path(target).expanduser().is_file():
        if serve:
            fail("--serve shows sessions and batches; an ATIF file is written as a page beside it", ExitCode.USAGE)
        with reported():
            written = _atif_page(Path(target).expanduser(), atif)
        console.print(f"wrote {written}", soft_wrap=True, markup=False)
        if open_browser and not _open_in_browser(written.resolve().as_uri()):
            err_console.print("no browser to open it here: open the file above")
        return
    folder, batch = _resolve(target, state)
    with reported():
        if serve:
            _serve(folder, batch, port, open_browser)
            return
        written = pages.write_batch(folder) if batch else pages.write_session(folder)
    console.print(f"wrote {written}", soft_wrap=True, markup=False)
    if open_browser and not _open_in_browser(written.resolve().as_uri()):
        err_console.print("no browser to open it here: open the file above")


def _atif_page(path: Path, atif: Any) -> Path:
    """FILE.html beside an ATIF FILE.json: the trajectory page of what it holds."""
    from harness.report import trajectory_page
    from sandbox.durable import write_text_atomic

    target = path.with_suffix(".html")
    write_text_atomic(target, trajectory_page.render(atif.to_view(atif.read(path), path)))
    return target


def _resolve(target: str, state: Path | None) -> tuple[Path, bool]:
    """(folder, is a batch) for a batch directory, a session folder or a session id."""
    path = Path(target).expanduser()
    if (path / "runs").is_dir():
        return path.resolve(), True
    if SessionFolder(path).trajectory.is_file() or SessionFolder(path).info.is_file():
        return path.resolve(), False
    if "/" not in target and not target.startswith("."):
        folder = state_dir(state) / target
        if SessionFolder(folder).trajectory.is_file() or SessionFolder(folder).info.is_file():
            return folder, False  # a session without a run: its commands, diffs and network
    fail(
        f"{target} is no batch directory (no runs/), session folder (no session.json) "
        "or session id (see: harness session list)",
        ExitCode.NOT_FOUND,
    )


def _serve(folder: Path, batch: bool, port: int, open_browser: bool) -> None:
    from harness.report.serve import Server, marks_endpoint, routes

    try:
        server = Server(routes(folder, batch=batch), port, marks=marks_endpoint(folder) if batch else None)
    except OSError as error:
        fail(f"cannot serve on 127.0.0.1:{port}: {error.strerror or error}", ExitCode.USAGE)
    console.print(f"serving {folder} at {server.url} (Ctrl-C stops)", soft_wrap=True, markup=False)
    if open_browser:
        _open_in_browser(server.url)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        console.print("stopped")
    finally:
        server.close()


def _open_in_browser(url: str) -> bool:
    """Whether a browser took url (webbrowser is imported only when one is asked for)."""
    import webbrowser

    return webbrowser.open(url)
