"""The report and trajectory pages as written: what they show, that untrusted text stays inert, that
links resolve, the policy they carry, `harness view` and `harness report --format html`, and the
server that re-reads on every request (a live session's new steps appear on reload)."""

from __future__ import annotations

import base64
import hashlib
import re
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import unquote

import pytest

from harness.batch.records import BatchDir
from harness.batch.worker import _trajectory_facts
from harness.config import ContextConfig, LimitsConfig, RunConfig
from harness.report import pages
from harness.report.html import CSP, HEADER_CSP, SCRIPT, STYLE, page
from harness.report.metrics import obstacles, report
from harness.report.render import as_markdown
from harness.report.serve import Server, routes
from harness.trajectory import EventRecord, Trajectory, read_records
from tests.agent.conftest import Harness
from tests.report.conftest import _turn, hostile_repo, run_session


def assert_inert(html: str, *, shown: bool = True) -> None:
    """No markup from the hostile content survived (shown: and it is there, as text): only our own
    script block, no event handlers, no style attributes, no javascript: links."""
    assert html.count("<script>") == 1 and "window.__pwned" not in html.split("<script>")[1].split("</script>")[0]
    assert "<script>window.__pwned" not in html and "<b>answer</b>" not in html
    assert not shown or "&lt;script&gt;window.__pwned" in html
    assert not re.search(r"<[^>]+\son\w+\s*=", html), "an event handler attribute got through"
    assert not re.search(r"<[^>]+\sstyle\s*=", html), "a style attribute (refused by the policy) is on the page"
    assert 'href="javascript:' not in html
    assert "</textarea></pre><b>" not in html


def test_the_policy_allows_only_the_pages_own_script_and_style_by_hash():
    def digest(block: str) -> str:
        return base64.b64encode(hashlib.sha256(block.encode()).digest()).decode()

    assert f"script-src 'sha256-{digest(SCRIPT)}'" in CSP and f"style-src 'sha256-{digest(STYLE)}'" in CSP
    assert "default-src 'none'" in CSP and "unsafe-inline" not in CSP and "http" not in CSP
    html = page("t", "<p>x</p>")
    assert f'content="{CSP}"' in html and f"<script>{SCRIPT}</script>" in html and f"<style>{STYLE}</style>" in html


def test_the_trajectory_page_shows_every_step_and_keeps_hostile_text_inert(hostile_session):
    html = pages.session_page(hostile_session)
    assert_inert(html)
    for step in (1, 2, 3, 4):
        assert f'id="step-{step}"' in html
    assert "read_file" in html and "apply_patch" in html
    assert "&quot;path&quot;: &quot;pkg/page.html&quot;" in html  # the call's arguments
    assert "by rule <code>" in html  # the gate's decision and rule
    assert 'class="call failed"' in html and "ERROR[" in html  # the missing file
    assert "Change in this step" in html and "+    return 42" in html  # the step's diff
    assert "Verify round 1" in html and "passed" in html
    assert 'id="patch"' in html and "diff --git a/pkg/mod.py" in html  # the final patch
    assert "obstacle" in html and "the &lt;script&gt; tags in page.html" in html
    assert "$0.0500 so far" in html  # cost so far after the last step
    assert "Tokens and cost per step" in html and "<svg" in html


def test_a_session_without_a_store_still_gets_its_page_with_the_problem_said(hostile_session):
    (hostile_session / "session.json").unlink()
    html = pages.session_page(hostile_session)
    assert "no step diffs" in html and 'id="step-3"' in html


def test_the_batch_report_links_every_task_run_with_a_session_to_its_page(hostile_batch):
    target = pages.write_batch(hostile_batch.root)
    html = target.read_text(encoding="utf-8")
    assert_inert(html, shown=False)
    hrefs = re.findall(r'href="([^"]+)"', html)
    assert len(hrefs) == 2 and all(h.startswith("pages/") for h in hrefs)
    for href in hrefs:
        linked = target.parent / unquote(href)
        assert linked.is_file(), href
        trajectory = linked.read_text(encoding="utf-8")
        assert_inert(trajectory)
        assert 'href="../report.html"' in trajectory
    assert "lost-task" in html and "sandbox_error" in html  # the task-run without a session: listed, no link
    assert "scripted:/tmp/&lt;b&gt;answer&lt;/b&gt;.yaml" in html
    assert "Outcomes (task-runs)" in html and "Cost per task-run" in html and "Tool-call turns" in html
    assert "biggest obstacles" in html and "the &lt;script&gt; tags in page.html" in html
    assert "Recurring tool errors" in html and "not_found" in html


def test_pages_are_rewritten_only_when_their_session_changed(hostile_batch):
    assert pages.write_session_pages(hostile_batch.root) == 2
    assert pages.write_session_pages(hostile_batch.root) == 0
    record = next(r for r in hostile_batch.records() if r.verified)
    trajectory = Trajectory(hostile_batch.sessions / record.session_id)
    trajectory.append(EventRecord(event="note", detail="appended later"))
    trajectory.close()
    assert pages.write_session_pages(hostile_batch.root) == 1


def test_obstacles_are_grouped_case_and_punctuation_aside():
    grouped = obstacles(["Flaky tests.", "flaky  tests", "the config", "", "Flaky tests."])
    assert grouped == {"Flaky tests.": 3, "the config": 1}


def test_the_loop_records_the_final_obstacle_line_and_the_worker_reads_it(hostile_session):
    events = [r for r in read_records(hostile_session) if r.kind == "event" and r.event == "obstacle"]
    assert [e.detail for e in events] == ["the <script> tags in page.html"]
    assert _trajectory_facts(hostile_session).obstacle == "the <script> tags in page.html"
    batch_report = report([], source="empty")
    assert batch_report.failures.obstacles == {}


def test_the_markdown_report_lists_the_obstacles(hostile_batch):
    text = as_markdown([report(hostile_batch.records(), source="b")])
    assert "biggest obstacles" in text and "the &lt;script&gt; tags in page.html: 2" in text


def test_a_context_fold_is_an_event_on_the_page(tmp_path):
    big = "x" * 3000 + "\n"
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "big.txt").write_text(big * 4, encoding="utf-8")
    turns = [_turn(f"read {n}", ("read_file", {"path": "big.txt", "start_line": 1 + n % 4})) for n in range(8)]
    config = RunConfig(
        model="scripted:x",
        verify="true",
        limits=LimitsConfig(max_steps=12),
        context=ContextConfig(budget_tokens=8000, keep_recent=1),
    )
    folder = run_session(repo, tmp_path / "state", "folds", [*turns, _turn("done")], config=config)
    folds = [r for r in read_records(folder) if r.kind == "event" and r.event == "context_folded"]
    assert folds and "folded" in folds[0].detail and "tokens (budget 8000)" in folds[0].detail
    assert "context_folded" in pages.session_page(folder)


# --- the CLI --------------------------------------------------------------------------------------


@pytest.fixture
def cli(tmp_path: Path) -> Harness:
    return Harness(tmp_path / "state", "report-pages")


def test_harness_view_writes_a_batchs_pages_and_a_sessions_page(cli, hostile_batch, hostile_session):
    ran = cli("view", str(hostile_batch.root), "--no-open")
    assert ran.code == 0, ran.stderr
    assert (hostile_batch.root / "report.html").is_file() and len(list((hostile_batch.root / "pages").iterdir())) == 2
    ran = cli("view", "hostile-1", "--state-dir", str(hostile_session.parent), "--no-open")
    assert ran.code == 0, ran.stderr
    assert_inert((hostile_session / "view.html").read_text(encoding="utf-8"))
    ran = cli("view", str(hostile_session), "--no-open")
    assert ran.code == 0 and "view.html" in ran.stdout


def test_harness_view_and_report_refuse_what_they_cannot_show(cli, tmp_path, hostile_batch):
    ran = cli("view", "no-such-session", "--no-open")
    assert ran.code == 66 and "no batch directory" in ran.stderr and "Traceback" not in ran.stderr
    ran = cli("report", str(hostile_batch.root), str(hostile_batch.root), "--format", "html")
    assert ran.code == 64 and "-o FILE" in ran.stderr
    ran = cli("report", str(hostile_batch.root), "--format", "pdf")
    assert ran.code == 64 and "md, json, html" in ran.stderr
    ran = cli("report", str(tmp_path), "--format", "html")
    assert ran.code == 66 and "no batch directory" in ran.stderr


def test_harness_report_html_side_by_side_links_into_each_batch(cli, tmp_path, hostile_batch):
    other = BatchDir(tmp_path / "other")
    other.root.mkdir()
    for record in hostile_batch.records():
        other.write(record.model_copy(update={"cost_usd": record.cost_usd * 2}))
    out = tmp_path / "out" / "compare.html"
    out.parent.mkdir()
    ran = cli("report", str(hostile_batch.root), str(other.root), "--format", "html", "-o", str(out))
    assert ran.code == 0, ran.stderr
    html = out.read_text(encoding="utf-8")
    assert "(2.00×)" in html  # the second batch's cost relative to the first
    for href in re.findall(r'href="([^"]+)"', html):
        assert (out.parent / unquote(href)).resolve().is_file(), href


# --- the server -----------------------------------------------------------------------------------


def get(url: str) -> tuple[int, dict[str, str], str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, dict(response.headers), response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read().decode()


def test_the_server_renders_on_each_request_with_the_policy_on_loopback_only(hostile_batch):
    server = Server(routes(hostile_batch.root, batch=True)).start()
    try:
        assert server.url.startswith("http://127.0.0.1:")
        status, headers, body = get(server.url)
        assert (
            status == 200
            and headers["Content-Security-Policy"] == HEADER_CSP
            and headers["Cache-Control"] == "no-store"
        )
        record = next(r for r in hostile_batch.records() if r.verified)
        href = f"pages/{record.session_id}.html"
        assert f'href="{href}"' in body
        status, _, trajectory = get(server.url + href)
        assert status == 200 and 'id="step-1"' in trajectory and "appended while served" not in trajectory
        log = Trajectory(hostile_batch.sessions / record.session_id)
        log.append(EventRecord(event="note", detail="appended while served"))
        log.close()
        assert "appended while served" in get(server.url + href)[2]  # a reload shows what is new
        for path in ("pages/../report.json", "pages/nope.html", "runs/", "report.md"):
            status, headers, body = get(server.url + path)
            assert status == 404 and headers["Content-Security-Policy"] == HEADER_CSP and "no page" in body
    finally:
        server.close()


def test_a_served_session_with_a_damaged_trajectory_is_a_page_saying_so(tmp_path):
    folder = run_session(hostile_repo(tmp_path / "repo"), tmp_path / "state", "s1", [_turn("done")])
    trajectory = folder / "trajectory.jsonl"
    trajectory.write_bytes(b"{not json}\n" + trajectory.read_bytes())
    server = Server(routes(folder, batch=False)).start()
    try:
        status, _, body = get(server.url)
        assert status == 500 and "damaged" in body and "Traceback" not in body
    finally:
        server.close()
