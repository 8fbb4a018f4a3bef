"""Where the pages go: a batch directory gets `report.html` and `pages/<session>.html` (one per
task-run, linked from the report); a single session gets one page. Pages are written atomically,
and a task-run's page is rewritten only when its session changed since."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

from harness.batch.adaptive import read_log
from harness.batch.plain import read_left, read_spend
from harness.batch.records import BatchDir, TaskRunRecord
from harness.errors import UsageError
from harness.report import harbor_jobs, report_page, session_view, trajectory_page
from harness.report.html import relative_href
from harness.report.marks import read_marks
from harness.report.metrics import report
from harness.report.overlaps import by_session, overlaps
from sandbox.durable import write_text_atomic
from sandbox.layout import SessionFolder

_DOCTYPE = "<!DOCTYPE html>\n"
PAGES = "pages"
REPORT = "report.html"


def session_dir(batch: BatchDir, record: TaskRunRecord) -> Path | None:
    """The session folder of a task-run (beside the records, wherever the batch was moved)."""
    if not record.session_id:
        return None
    here = batch.sessions / record.session_id
    if SessionFolder(here).trajectory.is_file():
        return here
    there = Path(record.session_dir) if record.session_dir else None
    return there if there is not None and SessionFolder(there).trajectory.is_file() else None


def page_path(batch: BatchDir, record: TaskRunRecord) -> Path:
    return batch.root / PAGES / f"{record.key.session_id}.html"


def session_page(folder: Path, *, back: str | None = None, review: Sequence[str] = ()) -> str:
    """The trajectory page of the session in folder, as it is now (review: lines about its place in
    the batch: what it overlaps, how to land it)."""
    return trajectory_page.render(session_view.load(folder), back=back, review=review)


def review_lines(root: Path, record: TaskRunRecord, overlapping: dict[str, list[str]]) -> list[str]:
    """What a reviewer of one task-run needs from the batch: its overlaps and the command that lands it."""
    lines = []
    others = overlapping.get(record.session_id, [])
    if others:
        lines.append(f"overlaps with {len(others)} other change(s): {', '.join(others)}")
    if record.verified and record.patch:
        lines.append(f"land it: harness apply {root} --pick {record.session_id}")
    return lines


def batch_report(dirs: Sequence[Path], *, page_dir: Path, linked: bool = True) -> str:
    """The report page of one or more batch directories, for a page that lives in page_dir."""
    batches = []
    for root in dirs:
        if harbor_jobs.is_job(root):
            batches.append(_harbor_batch(Path(root), page_dir, linked))
            continue
        batch = BatchDir(root)
        records = batch.records()

        def href(record: TaskRunRecord, batch: BatchDir = batch) -> str | None:
            if not linked or session_dir(batch, record) is None:
                return None
            return relative_href(page_path(batch, record), page_dir)

        made = report(
            records, source=str(root), concurrency=read_log(root), left_behind=read_left(root), spend=read_spend(root)
        )
        batches.append(report_page.Batch(made, records, href, read_marks(root)))
    return report_page.render(batches)


def _harbor_batch(root: Path, page_dir: Path, linked: bool) -> report_page.Batch:
    """A Harbor job as one batch of the report page; a trial whose agent wrote an ATIF trajectory
    links to it, rendered beside it (agent/trajectory.html)."""
    from harness.report import atif

    records = harbor_jobs.records(root)
    pages: dict[str, Path] = {}
    if linked:
        for record in records:
            source = harbor_jobs.trajectory_of(record)
            if source is None:
                continue
            try:
                view = atif.to_view(atif.read(source), source)
            except UsageError:
                continue
            target = source.with_suffix(".html")
            write_text_atomic(target, trajectory_page.render(view))
            pages[record.key.session_id] = target

    def href(record: TaskRunRecord) -> str | None:
        target = pages.get(record.key.session_id)
        return relative_href(target, page_dir) if target is not None else None

    return report_page.Batch(report(records, source=str(root)), records, href, {})


def write_session_pages(root: Path) -> int:
    """Write (or refresh) the trajectory page of every task-run of a batch; how many were written."""
    batch = BatchDir(root)
    written = 0
    records = batch.records()
    overlapping = by_session(overlaps(records))
    for record in records:
        folder = session_dir(batch, record)
        if folder is None:
            continue
        target = page_path(batch, record)
        review = review_lines(batch.root, record, overlapping)
        if _fresh(target, folder, review):
            continue
        source = _source(folder, review)  # before reading: a change while the page is made makes it stale
        target.parent.mkdir(parents=True, exist_ok=True)
        back = relative_href(batch.root / REPORT, target.parent)
        write_text_atomic(target, _stamped(session_page(folder, back=back, review=review), source))
        written += 1
    return written


def write_session(folder: Path) -> Path:
    """One session's page, `view.html` in its folder; its path."""
    target = SessionFolder(folder).view
    write_text_atomic(target, session_page(folder))
    return target


def write_batch(root: Path) -> Path:
    """report.html and every task-run's page in a batch directory (or a Harbor job's); the report's path."""
    if not harbor_jobs.is_job(root):
        write_session_pages(root)
    target = Path(root) / REPORT
    write_text_atomic(target, batch_report([Path(root)], page_dir=Path(root)))
    return target


def write_report(dirs: Sequence[Path], output: Path) -> Path:
    """One report page of several batches at output, with each batch's task-run pages refreshed."""
    for root in dirs:
        if not harbor_jobs.is_job(root):
            write_session_pages(root)
    write_text_atomic(output, batch_report(dirs, page_dir=output.resolve().parent))
    return output


def _source(folder: Path, review: Sequence[str] = ()) -> str:
    """What a session's page was made from: size and mtime of each file it shows (the trajectory is
    append-only, so any new record changes its size), and the batch's lines about it."""
    paths = SessionFolder(folder)
    parts = list(review)
    for path in (paths.trajectory, paths.patch, paths.steps):
        try:
            stat = path.stat()
            parts.append(f"{stat.st_size}:{stat.st_mtime_ns}")
        except FileNotFoundError:
            parts.append("-")
    return hashlib.sha256(" ".join(parts).encode()).hexdigest()[:16]


def _stamped(html: str, source: str) -> str:
    return html.replace(_DOCTYPE, f"{_DOCTYPE}<!-- harness source {source} -->\n", 1)


def _fresh(page: Path, folder: Path, review: Sequence[str] = ()) -> bool:
    """The page was made from the session as it is now."""
    try:
        with open(page, encoding="utf-8", errors="replace") as handle:
            head = handle.read(128)
    except FileNotFoundError:
        return False
    return f"<!-- harness source {_source(folder, review)} -->" in head
