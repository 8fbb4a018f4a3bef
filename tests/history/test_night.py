"""One user's night on histories written like real ones, every joint with the real CLI.

A Python shop whose code needs `nightdep` from a package index of its own (declared in its
requirements file, with an old pytest pin beside it), fixed in commits, a merged pull request, a
squash and an import tidy-up; a JavaScript library whose runner comes from its own npm registry; a
module-free Go library and a Go module that requires another. The index and the registry are
servers on 127.0.0.2 (the containers' 127.0.0.1 and localhost are their own: NO_PROXY).

mine → check → batch → report → marks → apply (each branch's tree is the tree that was verified,
its tests included, its parent the commit the task started from) → fork → export ATIF → view, and
resume of a run whose endpoint never answered, each step starting from what the one before made."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import re
import tarfile
import time
import urllib.request
import zipfile
from pathlib import Path

import pytest
import yaml
from dulwich.repo import Repo

from harness.batch.records import BatchDir
from harness.history.writer import HistoryWriter
from harness.trajectory import ToolRecord, read_records
from tests.agent.conftest import Harness, turn
from tests.sandbox.network.servers import Server

pytestmark = [pytest.mark.docker, pytest.mark.timeout(900)]

CART = """from nightdep import double


def total(prices):
    return round(sum(prices), 1)


def doubled(prices):
    return [double(p) for p in prices]


def tax(prices):
    return 0.1 * total(prices) if prices else None
"""
TESTS = """from shop.cart import doubled, tax, total


def test_total():
    assert total([1, 2]) == 3


def test_doubled():
    assert doubled([1]) == [2]
"""


def _wheel() -> tuple[str, bytes]:
    """nightdep 1.0 as a wheel, made here (what the shop's own index serves)."""
    files = {
        "nightdep/__init__.py": b"def double(x):\n    return 2 * x\n",
        "nightdep-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: nightdep\nVersion: 1.0\n",
        "nightdep-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = (
        "".join(
            f"{name},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},{len(data)}\n"
            for name, data in files.items()
        )
        + "nightdep-1.0.dist-info/RECORD,,\n"
    )
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as wheel:
        for name, data in {**files, "nightdep-1.0.dist-info/RECORD": record.encode()}.items():
            wheel.writestr(name, data)
    return "nightdep-1.0-py3-none-any.whl", out.getvalue()


def _runner(base: str) -> dict[str, bytes]:
    """An npm package `ava` (a tiny runner: each file given runs in node) and its registry metadata."""
    package = {"name": "ava", "version": "1.0.0", "bin": {"ava": "cli.js"}}
    cli = (
        "#!/usr/bin/env node\nconst {execFileSync} = require('child_process');\n"
        "for (const file of process.argv.slice(2)) {\n"
        "  try { execFileSync(process.execPath, [file], {stdio: 'inherit'}); console.log('ok ' + file); }\n"
        "  catch (error) { console.log('not ok ' + file); process.exit(1); }\n}\n"
    )
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for name, data in (("package/package.json", json.dumps(package).encode()), ("package/cli.js", cli.encode())):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o755
            tar.addfile(info, io.BytesIO(data))
    tarball = out.getvalue()
    meta = {
        "name": "ava",
        "dist-tags": {"latest": "1.0.0"},
        "versions": {
            "1.0.0": {
                **package,
                "dist": {"tarball": f"{base}/ava/-/ava-1.0.0.tgz", "shasum": hashlib.sha1(tarball).hexdigest()},
            }
        },
    }
    return {"/ava": json.dumps(meta).encode(), "/ava/-/ava-1.0.0.tgz": tarball}


def _shop(path: Path, index: str) -> dict[str, str]:
    """The Python history: fixes, a merged pull request, a squash, a tidy-up; the commits by name."""
    history = HistoryWriter(path)
    requirements = f"--index-url {index}/simple/\nnightdep==1.0\npytest==2.2.3\n"
    commits = {}
    history.commit("Start the shop", {
        "requirements.txt": requirements, "shop/__init__.py": "", "README.md": "a shop\n",
        "shop/cart.py": CART.replace("round(sum(prices), 1)", "int(sum(prices))"),
        "tests/test_cart.py": TESTS,
    })  # fmt: skip
    commits["total"] = history.commit("Fix the total of cents\n\nTotals were cut to whole units.", {
        "shop/cart.py": CART,
        "tests/test_cart.py": TESTS + "\n\ndef test_cents():\n    assert total([0.5, 0.25]) == 0.8\n",
    }).decode()  # fmt: skip
    history.checkout("discount", new=True)
    history.commit("Add a discount", {
        "shop/cart.py": CART + "\n\ndef discounted(prices, rate):\n    return [p * (1 - rate) for p in prices]\n",
        "tests/test_discount.py": "from shop.cart import discounted\n\n\ndef test_discount():\n"
                                  "    assert discounted([10], 0.5) == [5]\n",
    })  # fmt: skip
    history.commit("Note the discount", {"README.md": "a shop with discounts\n"})
    history.checkout("main")
    commits["discount"] = history.merge("discount", "Merge pull request #7 from dev/discount\n\nAdd discounts").decode()
    history.commit("Tidy the tests' imports", {
        "tests/test_cart.py": "from shop.cart import (doubled,\n    tax, total)\n" + TESTS.split("\n", 1)[1]
        + "\n\ndef test_cents():\n    assert total([0.5, 0.25]) == 0.8\n",
        "shop/cart.py": CART + "\n\ndef discounted(prices, rate):\n    return [p * (1 - rate) for p in prices]\n# tidy\n",
    })  # fmt: skip
    fixed = CART.replace("return 0.1 * total(prices) if prices else None", "return 0.1 * total(prices)")
    commits["tax"] = history.commit("Tax of an empty cart is zero (#9)", {
        "shop/cart.py": fixed + "\n\ndef discounted(prices, rate):\n    return [p * (1 - rate) for p in prices]\n# tidy\n",
        "tests/test_tax.py": "from shop.cart import tax\n\n\ndef test_empty():\n    assert tax([]) == 0\n",
    }).decode()  # fmt: skip
    history.close()
    return commits


def _tree(repo: Path, ref: str) -> tuple[str, list[str]]:
    with Repo(str(repo)) as git:
        commit = git[git.refs[f"refs/heads/{ref}".encode()]]
        return commit.tree.decode(), [parent.decode() for parent in commit.parents]


def _commit(repo: Path, sha: str) -> tuple[str, list[str], str]:
    with Repo(str(repo)) as git:
        commit = git[sha.encode()]
        return commit.tree.decode(), [parent.decode() for parent in commit.parents], commit.message.decode()


@pytest.fixture(scope="module")
def night(tmp_path_factory, run_label):
    top = tmp_path_factory.mktemp("night")
    wheel_name, wheel = _wheel()
    files = {
        "/simple/nightdep/": f'<a href="/files/{wheel_name}">{wheel_name}</a>'.encode(),
        f"/files/{wheel_name}": wheel,
    }
    with Server(files=files, host="127.0.0.2") as index:
        base = f"http://127.0.0.2:{index.port}"
        index.handler.files.update(_runner(base))
        commits = _shop(top / "shop", base)
        harness = Harness(top / "state", f"{run_label}-night")
        yield {"top": top, "harness": harness, "commits": commits, "base": base, "port": index.port}


def test_the_night_on_a_python_history(night, browser) -> None:
    top, harness, commits = night["top"], night["harness"], night["commits"]
    shop, tasks = top / "shop", top / "t.yaml"

    # mine: the merged pull request is one task, the tidy-up none; each task names where it came from
    mined = harness("tasks", "mine", str(shop), "-o", str(tasks), "--allow-net", f"127.0.0.2:{night['port']}")
    assert mined.code == 0, mined.stderr
    assert "its test changes check nothing new" in mined.stdout
    entries = {entry["tags"]["commit"]: entry for entry in yaml.safe_load(tasks.read_text())["tasks"]}
    assert set(entries) == set(commits.values()), entries.keys()
    total = entries[commits["total"]]
    assert total["tags"]["repository"] == str(shop.resolve()) and total["tags"]["parent"]
    assert total["allow_net"] == ["pypi", f"127.0.0.2:{night['port']}"]
    assert total["setup"] and "pytest" in total["setup"][0] and "-e ." not in " ".join(total["setup"])
    assert entries[commits["discount"]]["tags"]["source"] == "merge"

    # check: the dependency comes from the shop's index through the allowlist (the old pytest pin left
    # out); every task fails at its start and passes with its reference
    checked = harness("tasks", "check", str(tasks), "--json", timeout=600)
    assert checked.code == 0, checked.stderr
    verdicts = json.loads(checked.stdout)["verdicts"]
    assert [v["kind"] for v in verdicts] == ["sound"] * 3, verdicts
    sound = top / "t.sound.yaml"

    # batch with the reference model, and the report
    batch = top / "B"
    ran = harness("batch", str(sound), "--out", str(batch), "--model", "reference:", "--json", timeout=600)
    assert ran.code == 0, ran.stdout + ran.stderr
    records = {r.tags["commit"]: r for r in BatchDir(batch).records()}
    assert all(r.verified for r in records.values()) and len(records) == 3
    assert all(len(r.session_id) <= 80 for r in records.values()), [r.session_id for r in records.values()]
    report = harness("report", str(batch))
    assert report.code == 0 and "start from different commits" in report.stdout, report.stdout

    # marks in the served report: accept two, reject the merge
    _mark(browser, batch, {records[commits["total"]].session_id: "accepted",
                           records[commits["tax"]].session_id: "accepted",
                           records[commits["discount"]].session_id: "rejected"})  # fmt: skip

    # apply: no --repo (the tasks name the repository they were mined from)
    landed = harness("apply", str(batch), "--only", "accepted", "--branch-prefix", "night", "--json")
    assert landed.code == 0, landed.stdout + landed.stderr
    branches = {json.loads(line)["session_id"]: json.loads(line)["branch"] for line in landed.stdout.splitlines()}
    assert len(branches) == 2 and "not accepted (rejected)" in landed.stderr
    for name in ("total", "tax"):
        record = records[commits[name]]
        tree, parents = _tree(shop, branches[record.session_id].removeprefix("refs/heads/"))
        mined_tree, mined_parents, _ = _commit(shop, commits[name])
        assert tree == mined_tree, "the branch holds the verified tree: the task's tests and the change"
        assert parents == mined_parents[:1], "its parent is the commit the task started from"
    _, _, message = _commit(shop, json.loads(landed.stdout.splitlines()[0])["commit"])
    assert "read-only" not in message and "Mined from:" in message

    picked = records[commits["discount"]]
    again = harness("apply", str(batch), "--pick", picked.session_id, "--branch-prefix", "pick")
    assert again.code == 0, again.stderr  # what the task-run's page offers
    one = harness("apply", picked.session_id, "--state-dir", str(batch / "sessions"), "--onto", f"{commits['discount']}^",
                  "--branch", "night/one")  # fmt: skip
    assert one.code == 0, one.stderr
    assert _tree(shop, "night/one")[0] == _commit(shop, commits["discount"])[0]
    combined = harness("apply", str(batch), "--combine", "--branch", "night/all")
    assert combined.code == 0 and combined.stdout.count("branch night/all at") == 3, combined.stdout + combined.stderr
    with Repo(str(shop)) as git:  # the three in the order of their commits, the shop's file merged by hunk
        tip = git[git.refs[b"refs/heads/night/all"]]
        cart = git[git[tip.tree][b"shop"][1]][b"cart.py"][1]
        text = git[cart].data.decode()
    assert "round(sum(prices), 1)" in text and "def discounted" in text and "if prices else None" not in text

    # fork a task-run of the mined batch: it keeps its task (reference, category); another model's
    # script starts at its own first turn
    parent = records[commits["total"]]
    forks = top / "F"
    forked = harness("fork", parent.session_id, "--state-dir", str(batch / "sessions"), "--at", "1",
                     "--model", "reference:", "--out", str(forks), "--json")  # fmt: skip
    assert forked.code == 0, forked.stdout + forked.stderr
    [fork] = [r for r in BatchDir(forks).records() if not r.key.model.endswith("(parent)")]
    assert fork.verified and fork.tags["category"] == parent.tags["category"] and fork.reference
    script = top / "late.yaml"
    script.write_text(yaml.safe_dump({"turns": [turn("Looking first.", ("read_file", {"path": "shop/cart.py"})),
                                                turn("Done.")]}))  # fmt: skip
    scripted = harness("fork", parent.session_id, "--state-dir", str(batch / "sessions"), "--at", "1",
                       "--model", f"scripted:{script}", "--out", str(top / "F2"), "--json")  # fmt: skip
    assert scripted.code == 0, scripted.stdout + scripted.stderr
    [other] = [r for r in BatchDir(top / "F2").records() if not r.key.model.endswith("(parent)")]
    calls = [r for r in read_records(Path(other.session_dir)) if isinstance(r, ToolRecord)]
    assert calls[-1].name == "read_file" and "def total" in calls[-1].text, "the script's first turn answered first"

    # export the fork as ATIF and view it: the page says what the session's own page says
    trajectory = top / "fork.json"
    exported = harness("export", fork.session_id, "--state-dir", str(forks / "sessions"), "--format", "atif",
                       "-o", str(trajectory))  # fmt: skip
    assert exported.code == 0, exported.stderr
    assert harness("view", str(trajectory), "--no-open").code == 0
    assert harness("view", fork.session_id, "--state-dir", str(forks / "sessions"), "--no-open").code == 0
    from_atif = _text(trajectory.with_suffix(".html"))
    own = _text(Path(fork.session_dir) / "view.html")
    assert from_atif == own, "\n".join(line for line in set(from_atif) ^ set(own))
    assert "no change" not in from_atif and "not committed yet" not in from_atif

    # an empty change: export refuses in one line and writes nothing
    harness("rollback", fork.session_id, "--state-dir", str(forks / "sessions"), "--to", "0")
    empty = harness("export", fork.session_id, "--state-dir", str(forks / "sessions"), "-o", str(top / "e.patch"))
    assert empty.code == 64 and "changed nothing" in empty.stderr and not (top / "e.patch").exists()


def test_a_run_whose_endpoint_never_answered_resumes_with_another(night) -> None:
    """A refused connection ends in seconds with 69 and a hint that fits; the resume takes another
    model (recorded), and the run verifies."""
    harness, top = night["harness"], night["top"]
    start = next((top / "t.tasks").glob("*/repo"))
    reference = start.parent / "reference.json"
    task = "Make the tests pass."
    began = time.monotonic()
    failed = harness("run", str(start), "--task", task, "--model", "openai:gpt-x", "--base-url",
                     "http://127.0.0.1:9/v1", "--session", "gone", "--no-verify", env={"OPENAI_API_KEY": "sk-none"})  # fmt: skip
    assert failed.code == 69 and time.monotonic() - began < 60, failed.stderr
    assert "harness resume gone --base-url URL" in failed.stderr
    resumed = harness("resume", "gone", "--model", f"reference:{reference}")
    assert resumed.code == 10, resumed.stdout + resumed.stderr
    changed = [
        r for r in read_records(harness.session_dir("gone")) if r.kind == "event" and r.event == "resume_changed"
    ]
    assert changed and "openai:gpt-x" in changed[0].detail


def test_javascript_and_go_histories(night) -> None:
    """The JS library's runner comes from its registry (setup, through the allowlist): sound, and its
    branch lands; a module-free Go library needs no setup; a Go module that requires another cannot
    be judged without it, and the reason names the module."""
    top, harness, base = night["top"], night["harness"], night["base"]
    js = HistoryWriter(top / "js")
    package = {"name": "slug", "version": "1.0.0", "devDependencies": {"ava": "^1.0.0"}}
    js.commit("Start", {
        "package.json": json.dumps(package), ".npmrc": f"registry={base}/\naudit=false\nfund=false\n",
        "index.js": "module.exports = (s) => s.toLowerCase();\n",
        "test.js": "const assert = require('assert');\nconst slug = require('.');\nassert.equal(slug('A'), 'a');\n",
    })  # fmt: skip
    fix = js.commit("Dashes for spaces", {
        "index.js": "module.exports = (s) => s.toLowerCase().replace(/ /g, '-');\n",
        "test.js": "const assert = require('assert');\nconst slug = require('.');\nassert.equal(slug('A b'), 'a-b');\n",
    }).decode()  # fmt: skip
    js.close()
    go = HistoryWriter(top / "go")
    go.commit("Start", {"go.mod": "module example.com/mathx\n\ngo 1.19\n", "mathx.go": "package mathx\n\n"
                        "func Abs(x int) int { return x }\n", "mathx_test.go": "package mathx\n\nimport \"testing\"\n\n"
                        "func TestAbs(t *testing.T) { if Abs(2) != 2 { t.Fatal(2) } }\n"})  # fmt: skip
    go.commit("Abs of negatives", {"mathx.go": "package mathx\n\nfunc Abs(x int) int { if x < 0 { return -x }; return x }\n",
                                   "mathx_test.go": "package mathx\n\nimport \"testing\"\n\n"
                                   "func TestAbs(t *testing.T) { if Abs(-2) != 2 { t.Fatal(-2) } }\n"})  # fmt: skip
    go.close()
    go = HistoryWriter(top / "gomod")
    go.commit("Start", {"go.mod": "module example.com/mathx\n\ngo 1.19\n", "mathx.go": "package mathx\n\n"
                        "func Abs(x int) int { if x < 0 { return -x }; return x }\n"})  # fmt: skip
    go.commit("Compare with cmp", {"go.mod": "module example.com/mathx\n\ngo 1.19\n\nrequire github.com/google/go-cmp v0.6.0\n",
                                   "mathx.go": "package mathx\n\nfunc Abs(x int) int { if x < 0 { return -x }; return x }\n\n"
                                   "func Neg(x int) int { return -x }\n",
                                   "mathx_test.go": "package mathx\n\nimport (\n\t\"testing\"\n\t\"github.com/google/go-cmp/cmp\"\n)\n\n"
                                   "func TestNeg(t *testing.T) { if cmp.Diff(Neg(2), -2) != \"\" { t.Fatal(2) } }\n"})  # fmt: skip
    go.close()

    tasks = top / "js.yaml"
    assert (
        harness("tasks", "mine", str(top / "js"), "-o", str(tasks), "--allow-net", f"127.0.0.2:{night['port']}").code
        == 0
    )
    [entry] = yaml.safe_load(tasks.read_text())["tasks"]
    assert entry["verify"] == "npx --no-install ava test.js" and entry["setup"] == ["npm install"]
    checked = harness("tasks", "check", str(tasks), "--json", timeout=600)
    assert checked.code == 0 and json.loads(checked.stdout)["verdicts"][0]["kind"] == "sound", checked.stdout
    batch = top / "JB"
    assert (
        harness("batch", str(top / "js.sound.yaml"), "--out", str(batch), "--model", "reference:", timeout=600).code
        == 0
    )
    landed = harness("apply", str(batch), "--branch-prefix", "js")
    assert landed.code == 0, landed.stderr
    [branch] = re.findall(r"branch (\S+) at", landed.stdout)
    assert _tree(top / "js", branch)[0] == _commit(top / "js", fix)[0]

    free = top / "go.yaml"
    assert harness("tasks", "mine", str(top / "go"), "-o", str(free)).code == 0
    [entry] = yaml.safe_load(free.read_text())["tasks"]
    assert "setup" not in entry, "a module-free library needs no setup, and no network"
    assert json.loads(harness("tasks", "check", str(free), "--json").stdout)["verdicts"][0]["kind"] == "sound"
    needs = top / "gomod.yaml"
    assert harness("tasks", "mine", str(top / "gomod"), "-o", str(needs), "--setup", "none").code == 0
    verdict = json.loads(harness("tasks", "check", str(needs), "--json").stdout)["verdicts"][0]
    assert verdict["kind"] == "needs_modules" and "github.com/google/go-cmp" in verdict["reason"], verdict


def _mark(browser, batch: Path, marks: dict[str, str]) -> None:
    """The reviewer's clicks in the served report (the real page and server)."""
    from selenium.webdriver.common.by import By

    from harness.report.marks import read_marks
    from harness.report.serve import Server as Report
    from harness.report.serve import marks_endpoint, routes

    server = Report(routes(batch, batch=True), marks=marks_endpoint(batch)).start()
    try:
        browser.get(server.url)
        assert browser.execute_script("return document.documentElement.scrollWidth <= window.innerWidth + 1;")
        for button in browser.find_elements(By.CSS_SELECTOR, "button.mark-button"):
            if marks.get(button.get_attribute("data-session")) == button.get_attribute("data-mark"):
                button.click()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and read_marks(batch) != marks:
            time.sleep(0.1)
        assert read_marks(batch) == marks
    finally:
        server.close()


def _text(page: Path) -> list[str]:
    """The page as a reader sees it: its text, in order (no markup, no script)."""
    from html.parser import HTMLParser

    class Reader(HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.out: list[str] = []
            self.skip = 0

        def handle_starttag(self, tag: str, attrs: object) -> None:
            self.skip += tag in ("script", "style")

        def handle_endtag(self, tag: str) -> None:
            self.skip -= tag in ("script", "style")

        def handle_data(self, data: str) -> None:
            if not self.skip and data.strip():
                self.out.append(data.strip())

    reader = Reader()
    reader.feed(page.read_text(encoding="utf-8"))
    return reader.out


_ = urllib.request  # the servers are reached by the containers through the proxy, not from here
