"""Mining every language and every way work lands, on histories written with dulwich: a merged pull
request is one task (its title, its commits' subjects), a squash names its pull request,
--first-parent keeps merges out; Go runs packages, Rust test targets, Node its own runner or the one
package.json names, a root test.js counts; what a commit declares it needs (requires-python, go.mod,
engines.node, rust-version) goes with its task and is checked against a version; the yield."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.bench.histories import HISTORIES
from harness.history import environment, languages
from harness.history.diagnose import diagnose
from harness.history.mine import MineOptions, mine, reason_kind
from harness.history.reader import History
from harness.history.writer import HistoryWriter
from tests.agent.conftest import Harness


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("histories")
    for name, build in HISTORIES.items():
        build(root / name)
    return {name: root / name for name in HISTORIES}


def mined(path: Path, **options):
    with History.open(path) as history:
        return mine(history, MineOptions(**options))


def test_a_merged_pull_request_is_one_task_in_its_own_words(built):
    result = mined(built["python"])
    by_source = {t.source: t for t in result.tasks}
    merge = next(t for t in result.tasks if t.pull_request == 4)
    assert merge.source == "merge" and merge.id.endswith("-perimeter-of-squares-and-rectangles")
    assert merge.task.startswith("perimeter() of squares and rectangles\n\nThe pull request's commits:\n")
    assert "- Add perimeter()\n- Test perimeter()" in merge.task and "Merge pull request" not in merge.task
    assert merge.verify == "python3 -m pytest -q tests/test_perimeter.py" and list(merge.reference) == [
        "shapes/perimeter.py"
    ]
    assert "tests/test_perimeter.py" in merge.start and "shapes/perimeter.py" not in merge.start
    squash = by_source["squash"]
    assert squash.pull_request == 5 and squash.subject == "Add circle() (#5)"
    assert result.scanned == 12 and result.merges == 2
    subjects = {t.subject for t in result.tasks} | {s.subject for s in result.skipped}
    assert "Add perimeter()" not in subjects, "a merged branch's own commits are not mined again"
    kept_out = mined(built["python"], first_parent=True)
    assert [t for t in kept_out.tasks if t.source == "merge"] == []
    assert "merge commit (--first-parent keeps merges out)" in {s.reason for s in kept_out.skipped}


def test_each_language_gets_its_image_and_its_runner(built, tmp_path):
    go = {t.subject: t for t in mined(built["go"]).tasks}
    assert go["Merge pull request #2 from ada/queue"].verify == "go test ./queue"
    assert go["Pop takes the last item pushed"].verify == "go test ."
    assert {t.image for t in go.values()} == {"go"} and {t.language for t in go.values()} == {"go"}
    js = {t.subject: t for t in mined(built["javascript"]).tasks}
    assert js["cap() capitalises the first letter only"].verify == "node --test test.js", "a root test.js counts"
    assert js["Merge pull request #6 from ada/slug"].verify == "node --test test/slug.test.js"
    assert {t.image for t in js.values()} == {"node"}
    rust = {t.subject: t for t in mined(built["rust"]).tasks}
    assert rust["Merge pull request #3 from ada/halve"].verify == "cargo test --test halve"
    assert {t.image for t in rust.values()} == {"rust"}
    templated = mined(built["go"], verify="go test -count=1 {tests}", image="mine").tasks
    assert {t.verify for t in templated} >= {"go test -count=1 ./queue"} and {t.image for t in templated} == {"mine"}

    jest = HistoryWriter(tmp_path / "jest")
    jest.commit("Start", {"package.json": '{"devDependencies": {"jest": "29"}}', "sum.js": "x", "sum.test.js": "y"})
    jest.commit("Fix sum", {"sum.js": "z", "sum.test.js": "w"})
    jest.close()
    assert mined(tmp_path / "jest").tasks[0].verify == "npx --no-install jest sum.test.js"
    plain = HistoryWriter(tmp_path / "plain")
    plain.commit("Start", {"package.json": "{}", "index.js": "a", "check.js": "b"})
    plain.commit("Fix", {"index.js": "c", "check.js": "d"})
    plain.close()
    assert mined(tmp_path / "plain").tasks == []
    own = mined(tmp_path / "plain", tests=["check.js"]).tasks[0]
    assert own.verify == "node --test check.js" and own.image == "node", "--tests names files that hold tests"


def test_what_a_commit_declares_goes_with_its_task(built):
    python = {t.subject: t for t in mined(built["python"]).tasks}
    assert python["from_dict() takes any mapping"].environment == {
        "language": "python",
        "requires": ">=3.7,<3.10",
        "source": "pyproject.toml:project.requires-python",
    }
    assert python["Fix rect() adding its sides"].environment["requires"] == ">=3.8", "read at each task's start"
    go = mined(built["go"]).tasks[0]
    assert go.environment == {"language": "go", "requires": ">=1.18", "source": "go.mod:go"}
    js = mined(built["javascript"]).tasks[0]
    assert js.environment == {"language": "javascript", "requires": ">=16", "source": "package.json:engines.node"}
    rust = mined(built["rust"]).tasks[0]
    assert rust.environment == {"language": "rust", "requires": ">=1.56", "source": "Cargo.toml:package.rust-version"}


@pytest.mark.parametrize(
    ("language", "files", "requires"),
    [
        ("python", {".python-version": "3.8.10\n"}, "==3.8.*"),
        ("python", {"pyproject.toml": '[tool.poetry.dependencies]\npython = "^3.9"\n'}, ">=3.9,<4"),
        ("python", {"setup.cfg": "[options]\npython_requires = >=3.6\n"}, ">=3.6"),
        ("python", {"setup.py": "setup(python_requires='>=3.5, <4')"}, ">=3.5, <4"),
        ("javascript", {".nvmrc": "v18\n"}, "18.x"),
        ("javascript", {"package.json": '{"engines": {"node": "^18 || ^20"}}'}, "^18 || ^20"),
        ("rust", {"rust-toolchain.toml": '[toolchain]\nchannel = "1.70.0"\n'}, ">=1.70.0"),
        ("rust", {"rust-toolchain": "stable\n"}, None),
        ("go", {"go.mod": "module x\n\ngo 1.21.3\n"}, ">=1.21.3"),
        ("python", {"pyproject.toml": "not [ toml"}, None),
    ],
)
def test_declarations_are_read_from_the_files_that_make_them(language, files, requires):
    found = environment.declared(language, lambda path: files[path].encode() if path in files else None)
    assert (found.requires if found else None) == requires


@pytest.mark.parametrize(
    ("language", "version", "requires", "met"),
    [
        ("python", "3.11.2", ">=3.7,<3.10", False),
        ("python", "3.9.18", ">=3.7,<3.10", True),
        ("python", "3.11.2", "^3.8", True),
        ("python", "3.11.2", "==3.8.*", False),
        ("python", "3.11.2", "3.11", True),
        ("go", "go1.19.8", ">=1.21", False),
        ("go", "go1.19.8", ">=1.18", True),
        ("javascript", "v18.19.0", ">=16", True),
        ("javascript", "v18.19.0", "^18 || ^20", True),
        ("javascript", "v18.19.0", ">=20.0.0", False),
        ("javascript", "v18.19.0", "16 - 18", True),
        ("javascript", "v18.19.0", "~18.1", False),
        ("javascript", "v18.19.0", "18.x", True),
        ("javascript", "v18.19.0", "<18", False),
        ("rust", "rustc 1.63.0 (4b91a6ea7 2022-08-08)", ">=1.70", False),
        ("rust", "rustc 1.63.0 (4b91a6ea7 2022-08-08)", ">=1.56", True),
        ("python", "", ">=3.8", None),
        ("python", "3.11.2", "not a specifier", None),
    ],
)
def test_versions_meet_requirements_in_each_syntax(language, version, requires, met):
    assert environment.satisfies(language, version, requires) is met


def test_an_image_is_picked_for_what_a_commit_declares():
    versions = {"py311": "3.11.2", "py39": "3.9.18", "py38": "3.8.10"}
    assert environment.pick("python", ">=3.7,<3.10", versions, ["py311"]) == "py39"
    assert environment.pick("python", ">=3.12", versions, ["py311"]) is None
    assert environment.pick("python", ">=3.8", versions, ["py311"]) == "py311", "the task's own comes first"


def test_each_runner_saying_nothing_ran_is_no_tests():
    assert diagnose("# tests 0\n# pass 0\n", 1).kind == "no_tests"
    assert diagnose(
        "ok  \texample.com/stack\t0.01s [no tests to run]\ntesting: warning: no tests to run\n", 0
    ).kind == ("no_tests")
    assert diagnose("running 0 tests\n\ntest result: ok. 0 passed\n", 0).kind == "no_tests"
    assert diagnose("running 0 tests\nrunning 2 tests\ntest a ... FAILED\n", 101) is None, "another target ran"
    assert languages.ran_nothing("1 passed in 0.01s") is None


def test_skip_reasons_group_without_their_particulars():
    assert reason_kind("huge commit (900 code lines changed, at most 800)") == "huge commit"
    assert reason_kind("calc/logo.bin: a binary change (the tools cannot make it)") == "a binary change"
    assert reason_kind("unsafe path '../x'") == "unsafe path"


def test_tasks_mine_prints_the_yield_and_writes_it_beside_the_tasks(built, tmp_path):
    harness = Harness(tmp_path / "state", "mine-yield")
    output = tmp_path / "go" / "tasks.yaml"
    done = harness("tasks", "mine", str(built["go"]), "-o", str(output), "--json")
    assert done.code == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["yield"]["scanned"] == 7 and data["yield"]["by_language"] == {"go": 5}
    assert data["yield"]["by_source"] == {"commit": 3, "merge": 1, "squash": 1}
    assert data["yield"]["skipped_by_reason"] == {"root commit": 1, "no test changes": 1}  # adding go.mod
    assert json.loads((tmp_path / "go" / "tasks.tasks" / "mined.json").read_text())["tasks"] == 5
    text = harness("tasks", "mine", str(built["javascript"]), "-o", str(tmp_path / "js" / "tasks.yaml"))
    assert "yield: 7 commit(s) scanned (1 merges), 5 task(s) (javascript 5), 2 skipped" in text.stdout
    assert "skipped    1  root commit" in text.stdout and "skipped    1  only tests" in text.stdout
    written = (tmp_path / "js" / "tasks.yaml").read_text()
    assert "image: node" in written and "language: javascript" in written and "pull_request: 6" in written
    none = harness("tasks", "mine", str(built["go"]), "-o", str(tmp_path / "x.yaml"), "--paths", "nothing/")
    assert none.code == 66 and "(touches none of --paths x6; root commit x1)" in none.stderr
