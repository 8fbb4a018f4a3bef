"""Mining tasks from real history: which commits make tasks and why the others do not, the start
state (the parent plus the new tests), the task text (no diff, code or trailers), verify, read-only
tests, the reference kept apart, tags; bundles like working copies; a hostile repository whose
hooks, fsmonitor, filters, textconv and aliases never fire; the reference model's turns."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml
from dulwich.objects import Blob, Commit, Tree
from dulwich.repo import Repo as DulwichRepo

from harness.batch.tasks import load_tasks
from harness.errors import NotFoundError
from harness.history import materialize
from harness.history.mine import MineOptions, mine
from harness.history.reader import History
from harness.providers.factory import make_provider
from tests.agent.conftest import Harness
from tests.history.conftest import BUNDLE, Repo, history_repo

_OPEN: list[History] = []


def opened(path: Path) -> History:
    """History.open, closed when the test ends."""
    history = History.open(path)
    _OPEN.append(history)
    return history


@pytest.fixture(autouse=True)
def _close_histories():
    yield
    while _OPEN:
        _OPEN.pop().close()


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Repo:
    return history_repo(tmp_path_factory.mktemp("history") / "calc")


def reasons(mined) -> dict[str, str]:
    return {s.subject: s.reason for s in mined.skipped}


def test_commits_that_change_code_and_tests_make_tasks_and_the_rest_say_why_not(repo):
    mined = mine(opened(repo.path), MineOptions())
    assert [t.subject for t in mined.tasks] == ["half() halves, everywhere", "Fix add() subtracting"]
    why = reasons(mined)
    assert why["Tweak without tests"] == "no test changes (nothing to verify with)"
    assert why["Add a logo"].startswith("calc/logo.bin: a binary change")
    assert why["Generate a big table"].startswith("huge commit (900 code lines")
    assert why["Merge side"] == "no test changes (nothing to verify with)"  # a merge is a change like any
    kept_out = reasons(mine(opened(repo.path), MineOptions(first_parent=True)))
    assert kept_out["Merge side"] == "merge commit (--first-parent keeps merges out)"
    assert why["More tests"] == "only tests"
    assert why["Docs"] == "only docs or lockfiles"
    assert why["Start"].startswith("root commit")
    assert "Side work" not in why  # not on the first-parent line


def test_a_task_starts_at_the_parent_with_the_new_tests_and_keeps_the_reference_apart(repo, tmp_path):
    history = opened(repo.path)
    mined = mine(history, MineOptions())
    fix = mined.tasks[1]
    assert fix.verify == "python3 -m pytest -q tests/test_ops.py" and fix.read_only == ["tests/test_ops.py"]
    assert fix.category == "single-file-fix" and (fix.reference_files, fix.reference_lines) == (1, 2)
    assert (fix.max_files, fix.max_lines) == (3, 22)
    assert list(fix.reference) == ["calc/ops.py"] and b"tests/" not in fix.patch
    assert b"-    return a - b\n+    return a + b" in fix.patch
    output = tmp_path / "bench" / "tasks.yaml"
    output.parent.mkdir()
    states = materialize.write(mined, history, output, image="py311")
    start = states / fix.id / "repo"
    assert "return a - b" in (start / "calc/ops.py").read_text()  # the parent's code
    assert "assert add(2, 3) == 5" in (start / "tests/test_ops.py").read_text()  # the commit's test
    assert not (start / ".git").exists() and not (start / "tests/test_more.py").exists()
    reference = json.loads((states / fix.id / "reference.json").read_text())
    assert reference["files"]["calc/ops.py"]["content"] == (repo.path / "calc/ops.py").read_text().replace(
        "x / 2", "x / 3"
    )
    tasks = load_tasks(output)  # the file harness batch reads
    assert [t.id for t in tasks.tasks] == [t.id for t in mined.tasks]
    loaded = tasks.tasks[1]
    assert loaded.repo == start.resolve() and loaded.reference == (states / fix.id / "reference.json").resolve()
    assert loaded.read_only == ["tests/test_ops.py"] and loaded.tags.category == "single-file-fix"
    assert loaded.max_files == 3 and loaded.tags.model_dump()["commit"] == fix.commit
    skipped = json.loads((states / "skipped.json").read_text())
    assert {s["reason"] for s in skipped} >= {"no test changes (nothing to verify with)", "only tests"}


def test_the_task_text_is_the_message_without_the_answer(repo):
    fix = mine(opened(repo.path), MineOptions()).tasks[1]
    assert fix.task.startswith("Fix add() subtracting\n\nadd(2, 3) gave -1. The fix:")
    assert "return a + b" not in fix.task and "[code left out]" in fix.task
    assert "Signed-off-by" not in fix.task and "diff --git" not in fix.task
    assert fix.task.endswith(
        "tests/test_ops.py, which fail now. They are read-only: change the code so that they pass."
    )


def test_categories_and_how_many_files_a_change_needs_read(repo, tmp_path):
    half = mine(opened(repo.path), MineOptions()).tasks[0]
    assert half.category == "tests-added" and half.reference_files == 2
    assert half.files_to_read == 3 and not half.long_context  # ops.py, more.py, the test (imports resolved)
    wide = Repo(tmp_path / "wide")
    modules = {f"pkg/m{n}.py": f"V = {n}\n" for n in range(12)}
    wide.commit("Start", {"pkg/__init__.py": "", **modules, "pkg/core.py": "X = 0\n", "tests/test_x.py": ""})
    core = "".join(f"from pkg import m{n}\n" for n in range(6)) + "".join(f"import pkg.m{n}\n" for n in range(6, 12))
    wide.commit("Use every module", {"pkg/core.py": core + "X = 1\n", "tests/test_x.py": "def test(): pass\n"})
    task = mine(opened(wide.path), MineOptions()).tasks[0]
    assert task.files_to_read == 15 and task.long_context  # core, the test, pkg/__init__ and the 12 modules


def test_since_max_paths_tests_and_verify_narrow_the_mine(repo):
    history = opened(repo.path)
    fix_commit = mine(history, MineOptions()).tasks[1].commit
    assert [t.subject for t in mine(history, MineOptions(max_tasks=1)).tasks] == ["half() halves, everywhere"]
    assert [t.subject for t in mine(history, MineOptions(since=fix_commit[:10])).tasks] == ["half() halves, everywhere"]
    only_more = mine(history, MineOptions(paths=["calc/more.py"]))
    assert [t.subject for t in only_more.tasks] == ["half() halves, everywhere"]
    assert reasons(only_more)["Fix add() subtracting"] == "touches none of --paths"
    nothing = mine(history, MineOptions(tests=["spec/"]))  # no commit changes a spec/ path: no task
    assert (
        nothing.tasks == [] and reasons(nothing)["Fix add() subtracting"] == "no test changes (nothing to verify with)"
    )
    custom = mine(history, MineOptions(verify="pytest -x {tests}")).tasks[1]
    assert custom.verify == "pytest -x tests/test_ops.py"
    with pytest.raises(NotFoundError):
        mine(history, MineOptions(since="no-such-ref"))


def test_a_bundle_mines_like_the_repository_it_was_made_from(repo, tmp_path):
    bundle = tmp_path / "calc.bundle"
    repo.git("bundle", "create", "-q", str(bundle), "main")
    from_bundle = mine(opened(bundle), MineOptions())
    from_repo = mine(opened(repo.path), MineOptions())
    assert [(t.id, t.verify, t.patch) for t in from_bundle.tasks] == [
        (t.id, t.verify, t.patch) for t in from_repo.tasks
    ]
    example = mine(opened(BUNDLE), MineOptions())
    assert len(example.tasks) == 7 and {s.reason for s in example.skipped} >= {"only tests", "only docs or lockfiles"}


def test_a_hostile_repository_is_mined_with_none_of_its_traps_firing(tmp_path):
    markers = tmp_path / "markers"
    markers.mkdir()
    repo = Repo(tmp_path / "hostile")
    repo.commit("Start", {"app.py": "X = 0\n", "tests/test_app.py": ""})
    repo.commit("Fix X", {"app.py": "X = 1\n", "tests/test_app.py": "def test(): pass\n"})
    hooks = repo.path / ".git" / "hooks"
    for hook in (
        "post-checkout",
        "pre-commit",
        "post-merge",
        "reference-transaction",
        "pre-auto-gc",
        "fsmonitor-watchman",
    ):
        (hooks / hook).write_text(f"#!/bin/sh\ntouch {markers}/{hook}\n")
        (hooks / hook).chmod(0o755)
    with open(repo.path / ".git" / "config", "a") as config:
        config.write(
            f"[core]\n\tfsmonitor = touch {markers}/fsmonitor\n\thooksPath = {hooks}\n"
            f'[filter "evil"]\n\tsmudge = touch {markers}/smudge\n\tclean = touch {markers}/clean\n'
            f'\tprocess = touch {markers}/process\n[diff "evil"]\n\ttextconv = touch {markers}/textconv\n'
            f"[alias]\n\tlog = !touch {markers}/alias\n\tstatus = !touch {markers}/alias\n"
        )
    (repo.path / ".gitattributes").write_text("* filter=evil diff=evil\n")
    harness = Harness(tmp_path / "state", "mine-hostile")
    output = tmp_path / "out" / "tasks.yaml"
    ran = harness("tasks", "mine", str(repo.path), "-o", str(output), "--json")
    assert ran.code == 0, ran.stderr
    assert json.loads(ran.stdout)["tasks"][0]["category"] == "single-file-fix"
    time.sleep(0.2)
    assert sorted(p.name for p in markers.iterdir()) == [], "a trap fired"
    start = output.parent / "tasks.tasks" / json.loads(ran.stdout)["tasks"][0]["id"] / "repo"
    assert (start / "app.py").read_text() == "X = 0\n" and not (start / ".git").exists()


def test_a_commit_with_a_path_that_would_escape_is_skipped(tmp_path):
    path = tmp_path / "crafted"
    path.mkdir()
    raw = DulwichRepo.init(str(path))
    store = raw.object_store

    def tree(entries: dict[bytes, tuple[int, bytes]]) -> bytes:
        t = Tree()
        for name, (mode, sha) in entries.items():
            t.add(name, mode, sha)
        store.add_object(t)
        return t.id

    def blob(text: bytes) -> bytes:
        b = Blob.from_string(text)
        store.add_object(b)
        return b.id

    def commit(tree_id: bytes, parents: list[bytes], message: bytes) -> bytes:
        c = Commit()
        c.tree, c.parents, c.message = tree_id, parents, message
        c.author = c.committer = b"T <t@example.invalid>"
        c.author_time = c.commit_time = 1_700_000_000
        c.author_timezone = c.commit_timezone = 0
        store.add_object(c)
        return c.id

    tests = tree({b"test_a.py": (0o100644, blob(b"def test(): pass\n"))})
    first = commit(tree({b"a.py": (0o100644, blob(b"A = 0\n")), b"tests": (0o40000, tests)}), [], b"Start")
    evil = tree({b"hooks": (0o40000, tree({b"post-checkout": (0o100755, blob(b"#!/bin/sh\n"))}))})
    tests2 = tree({b"test_a.py": (0o100644, blob(b"def test(): assert 1\n"))})
    second = commit(
        tree({b"a.py": (0o100644, blob(b"A = 1\n")), b".git": (0o40000, evil), b"tests": (0o40000, tests2)}),
        [first],
        b"Sneak a .git in",
    )
    raw.refs[b"refs/heads/main"] = second
    raw.refs.set_symbolic_ref(b"HEAD", b"refs/heads/main")
    mined = mine(opened(path), MineOptions())
    assert mined.tasks == [] and reasons(mined)["Sneak a .git in"].startswith("unsafe path '.git/hooks/post-checkout'")


def test_the_cli_says_what_it_cannot_mine(tmp_path, repo):
    harness = Harness(tmp_path / "state", "mine-errors")
    ran = harness("tasks", "mine", str(tmp_path), "-o", str(tmp_path / "t.yaml"))
    assert ran.code == 66 and "no git repository" in ran.stderr and "Traceback" not in ran.stderr
    ran = harness("tasks", "mine", str(repo.path), "-o", str(tmp_path / "t.json"))
    assert ran.code == 64 and ".yaml" in ran.stderr
    ran = harness("tasks", "mine", str(repo.path), "-o", str(tmp_path / "t.yaml"), "--verify", "pytest")
    assert ran.code == 64 and "{tests}" in ran.stderr
    ran = harness("tasks", "mine", str(repo.path), "-o", str(tmp_path / "t.yaml"), "--tests", "nothing/")
    assert ran.code == 66 and "makes a task" in ran.stderr
    (tmp_path / "t.tasks").mkdir()
    ran = harness("tasks", "mine", str(repo.path), "-o", str(tmp_path / "t.yaml"))
    assert ran.code == 64 and "not written by harness tasks mine" in ran.stderr
    ran = harness("run", str(repo.path), "--model", "reference:", "--task", "x")
    assert ran.code == 64 and "reference: needs a task's reference file" in ran.stderr


def test_the_reference_model_reads_writes_and_deletes_through_the_tools(tmp_path):
    reference = tmp_path / "reference.json"
    files = {
        "a.py": {"content": "A = 1\n", "executable": False, "new": False},
        "new/b.sh": {"content": "#!/bin/sh\n", "executable": True, "new": True},
        "old.py": None,
    }
    reference.write_text(json.dumps({"commit": "x", "files": files}))
    provider = make_provider(f"reference:{reference}", api_key=None)
    turns = provider.turns  # type: ignore[attr-defined]
    assert [[c.name for c in t.tool_calls] for t in turns] == [
        ["read_file", "read_file"],
        ["write_file", "write_file", "run_command", "run_command"],
        ["run_tests"],
        [],  # then it says it is done
    ]
    assert turns[3].text.endswith("Biggest obstacle: none")
    assert [c.arguments["path"] for c in turns[0].tool_calls] == ["a.py", "old.py"]
    assert turns[1].tool_calls[0].arguments == {"path": "a.py", "content": "A = 1\n", "overwrite": True}
    assert turns[1].tool_calls[2].arguments["command"] == "rm -f -- old.py"
    assert turns[1].tool_calls[3].arguments["command"] == "chmod +x -- new/b.sh"
    final = provider.complete([], [], max_tokens=10)
    assert final.tool_calls and final.tool_calls[0].name == "read_file"
    lean = make_provider(f"reference-change:{reference}", api_key=None)  # what `tasks check` runs
    assert [t.tool_calls for t in lean.turns] == [turns[1].tool_calls, []]  # type: ignore[attr-defined]
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(Exception, match="not a readable reference file"):
        make_provider(f"reference:{tmp_path / 'bad.json'}", api_key=None)


def test_a_mined_tasks_file_round_trips_through_yaml(repo, tmp_path):
    history = opened(repo.path)
    output = tmp_path / "tasks.yaml"
    materialize.write(mine(history, MineOptions()), history, output, image="py311")
    raw = yaml.safe_load(output.read_text())
    assert raw["defaults"] == {"image": "py311", "read_only": []}
    assert raw["tasks"][1]["task"].startswith("Fix add() subtracting")
    materialize.write(mine(history, MineOptions(max_tasks=1)), history, output, image="py311")  # again: replaced
    assert len(load_tasks(output).tasks) == 1 and len(list((tmp_path / "tasks.tasks").iterdir())) == 4
