"""`harness apply` on a real repository with history (made here with dulwich), a hostile one: hooks
that would leave a marker, config keys and attributes that would run a program. The scripted model
fixes the example in a run; its change lands as a branch whose parent is the commit the session
started from, read back with dulwich and, as an independent check, with the `git` binary on a copy;
the original's HEAD, index, working tree and hooks are untouched and nothing ran. A branch that
exists is refused (and replaced with --force when harness made it); a moved original is handled by
--onto, and a conflicting one refused with the files named and nothing written; bare repositories
and linked worktrees too."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from dulwich import porcelain
from dulwich.repo import Repo

from tests.cli_process import run_cli

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-c", "from harness.cli import main; main()"]
pytestmark = [pytest.mark.docker, pytest.mark.timeout(300)]
IDENTITY = b"Tester <tester@example.invalid>"


def _harness(*args: str, state: Path, label: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HARNESS_RUN_ID": label, "HARNESS_STATE_DIR": str(state)}
    return run_cli(args, cwd=ROOT, env=env, timeout=240)


def _commit(repo: Path, message: str) -> str:
    porcelain.add(str(repo), paths=[str(p) for p in repo.rglob("*") if p.is_file() and ".git" not in p.parts])
    return porcelain.commit(str(repo), message=message.encode(), author=IDENTITY, committer=IDENTITY).decode()


def _fingerprint(repo: Path) -> dict[str, str]:
    """Every file of the working tree and the .git files apply must not touch, by digest."""
    found = {}
    for path in sorted(repo.rglob("*")):
        rel = path.relative_to(repo).as_posix()
        if path.is_file() and not rel.startswith(".git/objects/") and not rel.startswith(".git/refs/heads/harness"):
            found[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


@pytest.fixture(scope="module")
def landed(tmp_path_factory, run_label):
    """A hostile repository with two commits, and a verified run of the scripted fix on it."""
    top = tmp_path_factory.mktemp("apply")
    repo = top / "calc"
    shutil.copytree(ROOT / "examples" / "calc", repo)
    porcelain.init(str(repo))
    first = _commit(repo, "the calculator")
    (repo / "NOTES.md").write_text("notes\n")
    head = _commit(repo, "notes")
    marker = top / "MARKER"
    for hook in ("pre-commit", "post-commit", "reference-transaction", "post-checkout", "commit-msg"):
        script = repo / ".git" / "hooks" / hook
        script.parent.mkdir(exist_ok=True)
        script.write_text(f"#!/bin/sh\ntouch {marker}\n")
        script.chmod(0o755)
    with open(repo / ".git" / "config", "a") as config:
        config.write(f'[core]\n\tfsmonitor = "touch {marker}"\n\thooksPath = {repo / ".git" / "hooks"}\n')
        config.write(f'[filter "evil"]\n\tclean = touch {marker}\n\tsmudge = touch {marker}\n')
    (repo / ".git" / "info").mkdir(exist_ok=True)
    (repo / ".git" / "info" / "attributes").write_text("* filter=evil\n")
    state = top / "state"
    ran = _harness(
        "run", "--image", "py311", "--model", f"scripted:{ROOT / 'examples' / 'calc-fix.yaml'}", str(repo),
        "--task", "Fix the failing tests in calc.", "--verify", "python3 -m pytest -q", "--session", "fix", "--json",
        state=state, label=run_label,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stdout + ran.stderr
    return {"repo": repo, "state": state, "head": head, "first": first, "marker": marker, "label": run_label}


def test_the_change_lands_as_a_branch_and_nothing_else_changes(landed, tmp_path):
    repo, state = landed["repo"], landed["state"]
    before = _fingerprint(repo)
    done = _harness("apply", "fix", "--json", state=state, label=landed["label"])
    assert done.returncode == 0, done.stdout + done.stderr
    assert _fingerprint(repo) == before, "working tree, index, HEAD, config and hooks untouched"
    assert not landed["marker"].exists(), "no hook, filter or fsmonitor ran"
    with Repo(str(repo)) as read:
        branch = read.refs[b"refs/heads/harness/fix"]
        commit = read[branch]
        assert commit.parents == [landed["head"].encode()], "parent: the commit the session started from"
        assert commit.author == b"harness <harness@localhost>"
        message = commit.message.decode()
        assert message.startswith("Fix the failing tests in calc.\n") and "Harness-Session: fix" in message
        assert "Outcome: verified" in message and "Verify: `python3 -m pytest -q` passed" in message
        assert "I changed add()" in message
        assert read.refs[b"HEAD"] == landed["head"].encode(), "the current branch did not move"
    copy = tmp_path / "copy"
    shutil.copytree(repo, copy)
    git = ["git", "-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", "-C", str(copy)]
    assert subprocess.run([*git, "fsck", "--strict"], capture_output=True, text=True).returncode == 0
    shown = subprocess.run([*git, "diff", "--stat", "HEAD", "harness/fix"], capture_output=True, text=True).stdout
    assert "calc/ops.py | 2 +-" in shown and "1 file changed" in shown, shown
    body = subprocess.run([*git, "show", "harness/fix:calc/ops.py"], capture_output=True, text=True).stdout
    assert "return a + b" in body
    trail = (state / "fix" / "applied.jsonl").read_text()
    assert '"branch": "harness/fix"' in trail and '"by": ' in trail
    shown = _harness("show", "fix", state=state, label=landed["label"])
    assert f"applied: branch harness/fix at {branch.decode()[:12]} in {repo}" in shown.stdout.replace("\n", "")


def test_an_existing_branch_is_never_moved_unless_forced_and_ours(landed):
    state = landed["state"]
    again = _harness("apply", "fix", "--branch", "harness/again", state=state, label=landed["label"])
    assert again.returncode == 0, again.stderr
    refused = _harness("apply", "fix", "--branch", "harness/again", state=state, label=landed["label"])
    assert refused.returncode == 64 and "exists" in refused.stderr and "Traceback" not in refused.stderr
    forced = _harness("apply", "fix", "--branch", "harness/again", "--force", state=state, label=landed["label"])
    assert forced.returncode == 0, forced.stderr
    with Repo(str(landed["repo"])) as read:
        read.refs[b"refs/heads/theirs"] = landed["first"].encode()
    theirs = _harness("apply", "fix", "--branch", "theirs", "--force", state=state, label=landed["label"])
    assert theirs.returncode == 64 and "not made by harness" in theirs.stderr


def test_a_moved_original_lands_by_onto_or_is_refused_naming_the_files(landed, tmp_path):
    repo = tmp_path / "moved"
    shutil.copytree(landed["repo"], repo)
    (repo / ".git" / "info" / "attributes").unlink()  # the test's own commits below go through dulwich,
    # which would run the hostile clean filter: the moves are made plainly, apply still meets the config
    (repo / "README.txt").write_text("moved on\n")
    unrelated = _commit(repo, "an unrelated change")
    state = landed["state"]
    done = _harness(
        "apply", "fix", "--repo", str(repo), "--onto", "HEAD", "--branch", "on-head", state=state, label=landed["label"]
    )
    assert done.returncode == 0, done.stderr
    with Repo(str(repo)) as read:
        commit = read[read.refs[b"refs/heads/on-head"]]
        assert commit.parents == [unrelated.encode()] and "Rebased onto: HEAD" in commit.message.decode()
    ops = repo / "calc" / "ops.py"
    ops.write_text(ops.read_text().replace("return a - b", "return b - a"))
    _commit(repo, "a conflicting change")
    refused = _harness(
        "apply",
        "fix",
        "--repo",
        str(repo),
        "--onto",
        "HEAD",
        "--branch",
        "conflict",
        state=state,
        label=landed["label"],
    )
    assert refused.returncode == 64 and "conflicts with HEAD in 1 file(s): calc/ops.py" in refused.stderr, (
        refused.stderr
    )
    with Repo(str(repo)) as read:
        assert b"refs/heads/conflict" not in read.refs.allkeys(), "nothing written"


def test_bare_repositories_and_linked_worktrees(landed, tmp_path):
    bare = tmp_path / "bare.git"
    porcelain.clone(str(landed["repo"]), str(bare), bare=True, checkout=False)
    state = landed["state"]
    done = _harness("apply", "fix", "--repo", str(bare), "--branch", "in-bare", state=state, label=landed["label"])
    assert done.returncode == 0, done.stderr
    with Repo(str(bare)) as read:
        assert read[read.refs[b"refs/heads/in-bare"]].parents == [landed["head"].encode()]
    main = tmp_path / "main"
    shutil.copytree(landed["repo"], main)
    linked = tmp_path / "linked"
    git = ["git", "-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", "-C", str(main)]
    subprocess.run([*git, "worktree", "add", "-q", "--detach", str(linked)], check=True, capture_output=True)
    done = _harness(
        "apply", "fix", "--repo", str(linked), "--branch", "from-worktree", state=state, label=landed["label"]
    )
    assert done.returncode == 0, done.stderr
    with Repo(str(main)) as read:
        assert b"refs/heads/from-worktree" in read.refs.allkeys(), "the branch is in the shared refs"


def test_a_batch_lands_its_verified_task_runs_each_on_its_branch(landed, tmp_path, browser):
    import yaml

    tasks = tmp_path / "tasks.yaml"
    script = ROOT / "examples" / "calc-fix.yaml"
    tasks.write_text(
        yaml.safe_dump(
            {
                "defaults": {"model": [f"scripted:{script}"], "verify": "python3 -m pytest -q"},
                "tasks": [
                    {"id": "ok", "repo": str(landed["repo"]), "task": "Fix the failing tests in calc."},
                    {"id": "nope", "repo": str(landed["repo"]), "task": "Fix it.", "verify": "false",
                     "limits": {"max_steps": 8}},
                ],
            }
        )
    )  # fmt: skip
    alternative = tmp_path / "alt-fix.yaml"  # the same line fixed another way: a conflict for --combine
    alternative.write_text(script.read_text().replace('return a + b\\n"', 'return b + a\\n"'))
    assert "return b + a" in alternative.read_text()
    out = tmp_path / "night"
    ran = _harness(
        "batch", str(tasks), "--out", str(out), "--workers", "2", "--json", "--model", f"scripted:{script}",
        "--model", f"scripted:{alternative}", state=tmp_path, label=landed["label"],
    )  # fmt: skip
    assert ran.returncode == 0, ran.stdout + ran.stderr
    report = (out / "report.md").read_text()
    assert "### Overlapping changes" in report and "(same lines in calc/ops.py)" in report, report
    fix_page = next((out / "pages").glob("ok-*calc-fix*.html"))
    page = fix_page.read_text(encoding="utf-8")
    assert "overlaps with 1 other change(s)" in page and f"land it: harness apply {out} --pick ok-" in page
    done = _harness("apply", str(out), "--branch-prefix", "night", state=tmp_path, label=landed["label"])
    assert done.returncode == 0, done.stdout + done.stderr
    assert "branch night/ok/calc-fix.yaml at" in done.stdout and "branch night/ok/alt-fix.yaml at" in done.stdout
    assert "not landed: not verified" in done.stderr
    with Repo(str(landed["repo"])) as read:
        names = {ref.decode() for ref in read.refs.allkeys()}
    assert "refs/heads/night/ok/calc-fix.yaml" in names and not any(
        n.startswith("refs/heads/night/nope") for n in names
    )
    assert (out / "applied.jsonl").read_text().count('"branch"') == 2
    combined = _harness("apply", str(out), "--combine", "--branch", "night/all", state=tmp_path, label=landed["label"])
    assert combined.returncode == 0, combined.stdout + combined.stderr
    assert combined.stdout.count("branch night/all at") == 1, combined.stdout
    conflict = "not landed: the change conflicts with the changes stacked on night/all in 1 file(s): calc/ops.py"
    assert conflict in combined.stderr, combined.stderr
    with Repo(str(landed["repo"])) as read:
        assert read[read.refs[b"refs/heads/night/all"]].parents == [landed["head"].encode()], "one change stacked"
    import harness

    again = harness.apply(out, branch_prefix="api", pick=[fix_page.stem])
    assert [landed_.branch for landed_ in again] == ["api/ok/calc-fix.yaml"]
    _review_in_the_browser(browser, out, accept=fix_page.stem)
    accepted = _harness(
        "apply", str(out), "--only", "accepted", "--branch-prefix", "accepted", state=tmp_path, label=landed["label"]
    )
    assert accepted.returncode == 0, accepted.stdout + accepted.stderr
    assert accepted.stdout.count("branch accepted/") == 1 and "branch accepted/ok/calc-fix.yaml" in accepted.stdout
    assert "not landed: not accepted (rejected)" in accepted.stderr


def _review_in_the_browser(browser, out: Path, accept: str) -> None:
    """The served report in the real browser: accept one task-run, reject the other verified one;
    the marks are in the batch directory, never in the repository. A page of another origin cannot
    set one (no token)."""
    from selenium.webdriver.common.by import By

    from harness.report.marks import read_marks
    from harness.report.serve import Server, marks_endpoint, routes

    server = Server(routes(out, batch=True), marks=marks_endpoint(out)).start()
    try:
        browser.get(server.url)
        buttons = browser.find_elements(By.CSS_SELECTOR, "button.mark-button")
        assert buttons and all(b.is_displayed() for b in buttons), "served: the review buttons show"
        for button in buttons:
            session, mark = button.get_attribute("data-session"), button.get_attribute("data-mark")
            wanted = "accepted" if session == accept else "rejected"
            if mark == wanted and not session.startswith("nope-"):
                button.click()
        deadline = __import__("time").monotonic() + 10
        while __import__("time").monotonic() < deadline and len(read_marks(out)) < 2:
            __import__("time").sleep(0.1)
        marks = read_marks(out)
        assert marks[accept] == "accepted" and sorted(marks.values()) == ["accepted", "rejected"], marks
        cells = {c.get_attribute("data-session"): c.text for c in browser.find_elements(By.CSS_SELECTOR, "span.mark")}
        assert cells[accept] == "accepted"
        assert [e for e in browser.get_log("browser") if e["level"] == "SEVERE"] == []
        import urllib.error
        import urllib.request

        forged = urllib.request.Request(
            server.url + "marks",
            data=b'{"session": "x", "mark": "accepted"}',
            headers={"Content-Type": "application/json"},
        )
        try:
            urllib.request.urlopen(forged, timeout=5)
            raise AssertionError("a mark without the page's token was taken")
        except urllib.error.HTTPError as error:
            assert error.code == 403
    finally:
        server.close()
    written = (out / "report.html").read_text(encoding="utf-8")
    assert 'class="mark-button" hidden' in written, "a written page shows no buttons (nothing to send them to)"


def test_apply_never_writes_through_the_repositorys_links_and_takes_only_names_git_takes(landed, tmp_path):
    """A ref folder that is a link to elsewhere, a branch name git refuses, a ref another writer holds
    locked, a repository hashed with SHA-256: each is one line, exit 64, and nothing is written."""
    repo = tmp_path / "copy"
    shutil.copytree(landed["repo"], repo, symlinks=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    (repo / ".git" / "refs" / "heads" / "adv").symlink_to(outside)
    args = ["apply", "fix", "--repo", str(repo), "--state-dir", str(landed["state"])]
    through = _harness(*args, "--branch", "adv/applied", state=landed["state"], label=landed["label"])
    assert through.returncode == 64 and "never writes through a link" in through.stderr, through.stderr
    assert list(outside.iterdir()) == [], "nothing was written where the link leads"
    for name in ("HEAD", "a/.hidden", "a.lock/b", "x..y", "refs/heads/x"):
        refused = _harness(*args, "--branch", name, state=landed["state"], label=landed["label"])
        assert refused.returncode == 64 and "not a branch name git accepts" in refused.stderr, (name, refused.stderr)
        assert len(refused.stderr.strip().splitlines()) == 1
    (repo / ".git" / "refs" / "heads" / "held.lock").write_text("")
    locked = _harness(*args, "--branch", "held", state=landed["state"], label=landed["label"])
    assert locked.returncode == 64 and "being written by another program" in locked.stderr, locked.stderr
    assert not (repo / ".git" / "refs" / "heads" / "held").exists()
    wide = tmp_path / "sha256"
    (wide / "objects").mkdir(parents=True)
    (wide / "refs" / "heads").mkdir(parents=True)
    (wide / "HEAD").write_text("ref: refs/heads/main\n")
    (wide / "refs" / "heads" / "main").write_text("a" * 64 + "\n")
    other = _harness("apply", "fix", "--repo", str(wide), "--state-dir", str(landed["state"]), "--branch", "w",
                     state=landed["state"], label=landed["label"])  # fmt: skip
    assert other.returncode == 64 and "SHA-1 repositories only" in other.stderr, other.stderr
    assert "Traceback" not in through.stderr + locked.stderr + other.stderr


@pytest.mark.parametrize("name", ["/x", "x/", "a..b", "x.lock", "-x", "a b", "@", "refs/heads/x", ".x", "a//b"])
def test_a_branch_name_git_refuses_is_a_usage_error(landed, name):
    refused = _harness("apply", "fix", "--branch", name, state=landed["state"], label=landed["label"])
    assert refused.returncode == 64 and "is not a branch name git accepts" in refused.stderr, refused.stderr
