"""The in-container runner, executed here with the host python against a temp dir as its root."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from harness.tools import fileops, pathguard, runner

if TYPE_CHECKING:
    from sandbox.docker.containers import DockerSandbox


@pytest.fixture
def root(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / "src").mkdir(parents=True)
    (ws / "tests").mkdir()
    (ws / ".git").mkdir()
    (ws / "src" / "app.py").write_text("def f():\n    return 1\n\n\ndef g():\n    return 1\n")
    (ws / "tests" / "test_app.py").write_text("def test_f():\n    assert True\n")
    (ws / ".git" / "config").write_text("[core]\n")
    return ws


def call(root: Path, op: str, **args: object) -> dict:
    return runner.handle(
        {
            "op": op,
            "args": args,
            "root": str(root),
            "read_only": ["tests/"],
            "protected": [".git/", ".harness/"],
            "generated": ["*_pb2.py"],
            "max_bytes": 24000,
        }
    )


def test_script_protocol_argv_and_stdin(root: Path) -> None:
    request = {
        "op": "read_file",
        "args": {"path": "src/app.py", "start_line": 2, "end_line": None},
        "root": str(root),
        "protected": [".git/"],
        "read_only": [],
    }
    items = runner.encode_request(request)
    assert runner.decode_request(items) == {
        "op": "read_file",
        "args": {"path": "src/app.py", "start_line": "2"},
        "root": str(root),
        "protected": [".git/"],
    }
    by_argv = subprocess.run([sys.executable, "-I", "-S", runner.__file__, *items], capture_output=True, check=True)
    by_stdin = subprocess.run(
        [sys.executable, "-I", "-S", runner.__file__, "--stdin"],
        input=json.dumps(request).encode(),
        capture_output=True,
        check=True,
    )
    assert by_argv.stdout == by_stdin.stdout
    answer = runner.parse_answer(by_argv.stdout.decode())
    assert answer == {
        "ok": True,
        "kind": None,
        "wrote": [],
        "text": "OK read_file src/app.py: lines 2-6 of 6\n     2\t    return 1\n     3\t\n     4\t\n"
        "     5\tdef g():\n     6\t    return 1",
    }
    denied = subprocess.run(
        [
            sys.executable,
            "-I",
            "-S",
            runner.__file__,
            *runner.encode_request({**request, "args": {"path": ".git/config"}}),
        ],
        capture_output=True,
    )
    assert runner.parse_answer(denied.stdout.decode())["kind"] == "denied"


def test_read_path_does_not_import_json_or_re(root: Path) -> None:
    items = runner.encode_request(
        {
            "op": "read_file",
            "args": {"path": "src/app.py"},
            "root": str(root),
            "protected": [".git/", ".harness/"],
            "read_only": ["tests/"],
        }
    )
    out = subprocess.run(
        [sys.executable, "-I", "-S", "-X", "importtime", runner.__file__, *items],
        capture_output=True,
        text=True,
        check=True,
    )
    imported = {line.rsplit("|", 1)[-1].strip() for line in out.stderr.splitlines() if "|" in line}
    assert out.stdout.startswith("OK\n") and "os" in imported
    assert not imported & {"json", "re", "subprocess"}


def test_read_file_truncates_at_800_lines_with_exact_marker(root: Path) -> None:
    (root / "big.txt").write_text("".join(f"line {n}\n" for n in range(1, 1001)))
    text = call(root, "read_file", path="big.txt")["text"]
    assert text.splitlines()[-1] == "[TRUNCATED: lines 1-800 of 1000 shown; continue with start_line=801]"
    rest = call(root, "read_file", path="big.txt", start_line=801)["text"]
    assert rest.splitlines()[0] == "OK read_file big.txt: lines 801-1000 of 1000"
    assert "TRUNCATED" not in rest
    window = call(root, "read_file", path="big.txt", start_line=10, end_line=12)["text"]
    assert window.splitlines()[1:] == ["    10\tline 10", "    11\tline 11", "    12\tline 12"]


def test_read_file_with_a_pattern_shows_matches_with_context_and_says_how_many(root: Path) -> None:
    (root / "big.txt").write_text("".join(f"{'needle' if n in (10, 12, 500) else 'hay'} {n}\n" for n in range(1, 1001)))
    text = call(root, "read_file", path="big.txt", pattern=r"^needle", context=1)["text"]
    lines = text.splitlines()
    assert lines[0] == "OK read_file big.txt: 3 line(s) match '^needle' (lines 1-1000 of 1000 searched)"
    assert lines[1:] == [
        "     9\thay 9", "    10\tneedle 10", "    11\thay 11", "    12\tneedle 12", "    13\thay 13",
        "--", "   499\thay 499", "   500\tneedle 500", "   501\thay 501",
    ]  # fmt: skip
    window = call(root, "read_file", path="big.txt", pattern="needle", context=0, start_line=11, end_line=600)
    assert window["text"].splitlines()[1:] == ["    12\tneedle 12", "--", "   500\tneedle 500"]
    none = call(root, "read_file", path="big.txt", pattern="absent")["text"]
    assert none == "OK read_file big.txt: no line matches 'absent' (lines 1-1000 of 1000 searched)"
    bad = call(root, "read_file", path="big.txt", pattern="(")
    assert bad["ok"] is False and bad["kind"] == "invalid_arguments" and "not a valid regular expression" in bad["text"]


def test_read_file_byte_budget_marks_truncation(root: Path) -> None:
    (root / "wide.txt").write_text(("x" * 500 + "\n") * 200)
    text = call(root, "read_file", path="wide.txt")["text"]
    last = text.splitlines()[-1]
    assert last.startswith("[TRUNCATED: lines 1-") and "of 200 shown; continue with start_line=" in last


def test_read_file_refuses_binary_and_directories_and_bad_ranges(root: Path) -> None:
    (root / "blob.bin").write_bytes(b"\x7fELF\x00\x01\x02")
    answer = call(root, "read_file", path="blob.bin")
    assert (answer["ok"], answer["kind"]) == (False, "execution_error") and "binary file" in answer["text"]
    assert "is a directory" in call(root, "read_file", path="src")["text"]
    assert "does not exist" in call(root, "read_file", path="nope.py")["text"]
    assert call(root, "read_file", path="src/app.py", start_line=50)["kind"] == "invalid_arguments"


def test_a_raw_read_gives_the_text_as_it_is_in_the_lines_asked_and_refuses_what_read_file_refuses(root: Path) -> None:
    assert call(root, "read_raw", path="src/app.py")["text"] == "def f():\n    return 1\n\n\ndef g():\n    return 1\n"
    assert call(root, "read_raw", path="src/app.py", line=5, limit=1)["text"] == "def g():\n"
    assert call(root, "read_raw", path="src/app.py", line=2)["text"].startswith("    return 1\n\n")
    (root / "blob.bin").write_bytes(b"\x7fELF\x00\x01\x02")
    assert "binary file" in call(root, "read_raw", path="blob.bin")["text"]
    assert not call(root, "read_raw", path="../outside.txt")["ok"]
    (root / "big.txt").write_text("\x01" * 50_000)  # 300 kB as the answer carries it
    answer = call(root, "read_raw", path="big.txt")
    assert (answer["ok"], answer["kind"]) == (False, "output_limit") and "fewer lines" in answer["text"]


def test_read_is_stable(root: Path) -> None:
    assert call(root, "read_file", path="src/app.py") == call(root, "read_file", path="src/app.py")


def test_list_dir_skips_generated_and_ignored(root: Path) -> None:
    for name in ("node_modules/x", "__pycache__/a", "build/b", "dist/c", "logs/d"):
        (root / name).mkdir(parents=True)
    (root / "debug.log").write_text("x")
    (root / "keep.log").write_text("x")
    (root / ".gitignore").write_text("*.log\n!keep.log\nlogs/\n")
    text = call(root, "list_dir", path=".", depth=2)["text"]
    lines = text.splitlines()
    assert "src/" in lines and "  app.py" in lines and "keep.log" in lines
    (root / ".harness").mkdir()
    lines = call(root, "list_dir", path=".", depth=2)["text"].splitlines()
    lines = [line for line in lines if line]
    for hidden in ("node_modules/", "__pycache__/", "build/", "dist/", "logs/", "debug.log", ".git/", ".harness/"):
        assert hidden not in lines


def test_list_dir_caps_entries(root: Path) -> None:
    many = root / "many"
    many.mkdir()
    for n in range(450):
        (many / f"f{n:03}").write_text("")
    text = call(root, "list_dir", path="many", depth=1)["text"]
    assert text.splitlines()[-1] == "[TRUNCATED: 400 of 450 entries shown; list a subdirectory or use a smaller depth]"


def test_apply_patch_exactly_once_zero_and_several(root: Path) -> None:
    ok = call(
        root, "apply_patch", path="src/app.py", old_text="def g():\n    return 1\n", new_text="def g():\n    return 2\n"
    )
    assert ok["ok"] and ok["wrote"] == ["src/app.py"]
    assert (root / "src/app.py").read_text().endswith("return 2\n")
    zero = call(root, "apply_patch", path="src/app.py", old_text="return 3", new_text="x")
    several = call(root, "apply_patch", path="src/app.py", old_text="def ", new_text="x")
    assert "not found" in zero["text"] and "re-read the file" in zero["text"].lower()
    assert "matches 2 times" in several["text"] and "more surrounding lines" in several["text"]


def test_apply_patch_keeps_crlf(root: Path) -> None:
    (root / "win.txt").write_bytes(b"a\r\nb\r\n")
    assert call(root, "apply_patch", path="win.txt", old_text="a\nb", new_text="a\nc")["ok"]
    assert (root / "win.txt").read_bytes() == b"a\r\nc\r\n"


def test_apply_unified_diff_multi_hunk_and_new_file(root: Path) -> None:
    diff = (
        "--- a/src/app.py\n+++ b/src/app.py\n@@ -1,2 +1,2 @@\n def f():\n-    return 1\n+    return 10\n"
        "@@ -5,2 +5,2 @@\n def g():\n-    return 1\n+    return 20\n"
        "--- /dev/null\n+++ b/src/new.py\n@@ -0,0 +1,2 @@\n+x = 1\n+y = 2\n"
    )
    answer = call(root, "apply_patch", diff=diff)
    assert answer["ok"], answer
    assert (root / "src/app.py").read_text() == "def f():\n    return 10\n\n\ndef g():\n    return 20\n"
    assert (root / "src/new.py").read_text() == "x = 1\ny = 2\n"
    assert fileops.diff_paths(diff) == ["src/app.py", "src/new.py"]


GIT_DIFF = """\
diff --git a/src/app.py b/src/main.py
similarity index 80%
rename from src/app.py
rename to src/main.py
index 1111111..2222222 100644
--- a/src/app.py
+++ b/src/main.py
@@ -4,3 +4,3 @@

 def g():
-    return 1
+    return 2
diff --git a/old.txt b/old.txt
deleted file mode 100644
index 3333333..0000000
--- a/old.txt
+++ /dev/null
@@ -1,2 +0,0 @@
-one
-two
diff --git a/bin/run b/bin/run
new file mode 100755
index 0000000..4444444
--- /dev/null
+++ b/bin/run
@@ -0,0 +1,2 @@
+#!/bin/sh
+echo hi
\\ No newline at end of file
diff --git a/empty.txt b/empty.txt
new file mode 100644
index 0000000..e69de29
diff --git "a/caf\\303\\251.txt" "b/docs/caf\\303\\251.txt"
similarity index 100%
rename from "caf\\303\\251.txt"
rename to "docs/caf\\303\\251.txt"
"""


def test_git_diff_renames_deletes_creates_with_modes_and_quoted_paths(root: Path) -> None:
    (root / "old.txt").write_text("one\ntwo\n")
    (root / "café.txt").write_text("accent\n")
    os.chmod(root / "src/app.py", 0o755)
    assert fileops.diff_paths(GIT_DIFF) == [
        "src/app.py",
        "src/main.py",
        "old.txt",
        "bin/run",
        "empty.txt",
        "café.txt",
        "docs/café.txt",
    ]
    answer = call(root, "apply_patch", diff=GIT_DIFF)
    assert answer["ok"], answer
    assert answer["text"] == (
        "OK apply_patch: src/app.py -> src/main.py (renamed, 1 hunk(s)), old.txt (deleted), "
        "bin/run (created), empty.txt (created), café.txt -> docs/café.txt (renamed, 0 hunk(s))"
    )
    assert sorted(answer["wrote"]) == sorted(
        ["src/main.py", "src/app.py", "old.txt", "bin/run", "empty.txt", "docs/café.txt", "café.txt"]
    )
    assert not (root / "src/app.py").exists() and not (root / "old.txt").exists() and not (root / "café.txt").exists()
    assert (root / "src/main.py").read_text() == "def f():\n    return 1\n\n\ndef g():\n    return 2\n"
    assert os.stat(root / "src/main.py").st_mode & 0o777 == 0o755, "a renamed file keeps its mode"
    assert (root / "bin/run").read_text() == "#!/bin/sh\necho hi" and os.stat(root / "bin/run").st_mode & 0o777 == 0o755
    assert (root / "empty.txt").read_bytes() == b"" and (root / "docs/café.txt").read_text() == "accent\n"


def test_plain_dev_null_deletion_must_remove_every_line(root: Path) -> None:
    partial = "--- a/src/app.py\n+++ /dev/null\n@@ -1,2 +0,0 @@\n-def f():\n-    return 1\n"
    answer = call(root, "apply_patch", diff=partial)
    assert (answer["ok"], answer["kind"]) == (False, "execution_error") and "remove all of its lines" in answer["text"]
    whole = "--- a/src/app.py\n+++ /dev/null\n@@ -1,6 +0,0 @@\n" + "".join(
        f"-{line}\n" for line in (root / "src/app.py").read_text().splitlines()
    )
    assert call(root, "apply_patch", diff=whole)["ok"] and not (root / "src/app.py").exists()


def test_diff_refusals_change_nothing(root: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("s\n")
    os.symlink(outside, root / "out")
    os.symlink("src/app.py", root / "alias.py")
    before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file() and not p.is_symlink()}
    delete_all = "@@ -1,6 +0,0 @@\n" + "".join(f"-{x}\n" for x in (root / "src/app.py").read_text().splitlines())
    cases = {
        "rename into a symlinked dir": (
            "denied",
            "diff --git a/src/app.py b/out/app.py\nrename from src/app.py\nrename to out/app.py\n",
        ),
        "delete through a symlink": ("denied", "--- a/out/secret\n+++ /dev/null\n@@ -1 +0,0 @@\n-s\n"),
        "delete a symlink itself": ("denied", "--- a/alias.py\n+++ /dev/null\n" + delete_all),
        "create outside": ("denied", "--- /dev/null\n+++ b/../escape.py\n@@ -0,0 +1 @@\n+x\n"),
        "delete a read-only file": (
            "denied",
            "--- a/tests/test_app.py\n+++ /dev/null\n@@ -1,2 +0,0 @@\n-def test_f():\n-    assert True\n",
        ),
        "rename out of a read-only area": (
            "denied",
            "diff --git a/tests/test_app.py b/t.py\nrename from tests/test_app.py\nrename to t.py\n",
        ),
        "rename onto an existing file": (
            "execution_error",
            "diff --git a/src/app.py b/tests/../src/app.py\nrename from src/app.py\nrename to .git/../src/app.py\n",
        ),
        "a symlink mode": (
            "invalid_arguments",
            "diff --git a/l b/l\nnew file mode 120000\n--- /dev/null\n+++ b/l\n@@ -0,0 +1 @@\n+/etc/passwd\n",
        ),
        "the same file twice": (
            "invalid_arguments",
            "--- /dev/null\n+++ b/n.py\n@@ -0,0 +1 @@\n+x\n"
            "diff --git a/src/app.py b/n.py\ncopy from src/app.py\ncopy to n.py\n",
        ),
        "a later hunk fails": (
            "execution_error",
            "--- /dev/null\n+++ b/fresh.py\n@@ -0,0 +1 @@\n+x\n"
            "--- a/src/app.py\n+++ b/src/app.py\n@@ -1 +1 @@\n-nope\n+x\n",
        ),
    }
    for label, (kind, diff) in cases.items():
        answer = call(root, "apply_patch", diff=diff)
        assert (answer["ok"], answer["kind"]) == (False, kind), (label, answer)
    after = {p: p.read_bytes() for p in root.rglob("*") if p.is_file() and not p.is_symlink()}
    assert after == before and (outside / "secret").read_text() == "s\n"
    assert sorted(p.name for p in outside.iterdir()) == ["secret"] and not (root.parent / "escape.py").exists()


def test_insertion_hunk_without_context_lands_after_its_line(root: Path) -> None:
    diff = "--- a/src/app.py\n+++ b/src/app.py\n@@ -2,0 +3 @@\n+    # after line 2\n"
    assert call(root, "apply_patch", diff=diff)["ok"]
    assert (root / "src/app.py").read_text().splitlines()[1:4] == ["    return 1", "    # after line 2", ""]


def test_diff_that_does_not_match_changes_nothing(root: Path) -> None:
    before = (root / "src/app.py").read_text()
    diff = "--- a/src/app.py\n+++ b/src/app.py\n@@ -1,2 +1,2 @@\n def f():\n-    return 99\n+    return 1\n"
    answer = call(root, "apply_patch", diff=diff)
    assert not answer["ok"] and "does not match" in answer["text"]
    assert (root / "src/app.py").read_text() == before


def test_write_file_refuses_overwrite_unless_asked(root: Path) -> None:
    assert call(root, "write_file", path="pkg/new/mod.py", content="x = 1\n")["ok"]
    refused = call(root, "write_file", path="pkg/new/mod.py", content="y")
    assert not refused["ok"] and "overwrite=true" in refused["text"]
    assert call(root, "write_file", path="pkg/new/mod.py", content="y", overwrite=True)["ok"]
    assert (root / "pkg/new/mod.py").read_text() == "y"


def test_symlinks_out_of_the_root_are_refused(root: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("s3cret")
    os.symlink(outside, root / "linkdir")
    os.symlink(outside / "secret", root / "link.txt")
    for op, args in (
        ("read_file", {"path": "linkdir/secret"}),
        ("read_file", {"path": "link.txt"}),
        ("list_dir", {"path": "linkdir"}),
        ("write_file", {"path": "linkdir/new", "content": "x"}),
        ("write_file", {"path": "link.txt", "content": "x", "overwrite": True}),
    ):
        answer = call(root, op, **args)
        assert (answer["ok"], answer["kind"]) == (False, "denied"), (op, answer)
    assert (outside / "secret").read_text() == "s3cret" and not (outside / "new").exists()


def test_symlink_aliases_of_protected_and_read_only_areas(root: Path) -> None:
    os.symlink("tests", root / "t")
    os.symlink(".git", root / "g")
    assert call(root, "write_file", path="t/test_new.py", content="x")["kind"] == "denied"
    assert call(root, "read_file", path="g/config")["kind"] == "denied"
    assert call(root, "read_file", path="t/test_app.py")["ok"]


def test_symlink_swapped_in_after_the_check_is_not_followed(root: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    space = pathguard.Space({"root": str(root)})
    rel = space.resolve("src/app.py", write=True)  # the check passes...
    os.rename(root / "src", root / "src.real")
    os.symlink(outside, root / "src")  # ...then a directory on the path becomes a symlink
    with pytest.raises(pathguard.Failure) as refused:
        space.write_bytes(rel, b"pwned")
    assert refused.value.kind == "denied"
    with pytest.raises(pathguard.Failure):
        space.read_bytes(rel)
    assert list(outside.iterdir()) == []


def test_generated_files_are_refused_with_a_pointer_to_their_source(root: Path) -> None:
    def edit(path: str) -> dict:
        return call(root, "apply_patch", path=path, old_text="x = 1", new_text="x = 2")

    (root / "src" / "api.py").write_text("# Code generated by openapi-gen from spec/api.yaml. DO NOT EDIT.\nx = 1\n")
    refused = edit("src/api.py")
    assert refused["ok"] is False and refused["kind"] == "denied"
    assert "generated file" in refused["text"] and "Its source is spec/api.yaml" in refused["text"]
    (root / "proto").mkdir()
    (root / "proto" / "user.proto").write_text('syntax = "proto3";\n')
    (root / "src" / "user_pb2.py").write_text("x = 1\n")  # no header: the glob decides
    refused = edit("src/user_pb2.py")
    assert refused["kind"] == "denied" and "Its source is proto/user.proto" in refused["text"]
    written = call(root, "write_file", path="src/user_pb2.py", content="y", overwrite=True)
    assert written["kind"] == "denied"
    (root / "src" / "plain.py").write_text('"""Generates reports (not generated itself)."""\nx = 1\n')
    assert edit("src/plain.py")["ok"] is True
    (root / "src" / "made.py").write_text("# @generated by a tool\nx = 1\n")
    assert "Find the file it is generated from" in edit("src/made.py")["text"]


def test_run_tests_reports_only_failures(root: Path) -> None:
    (root / "tests" / "test_app.py").write_text(
        "def test_ok():\n    assert 1\n\n\ndef test_bad():\n    x = 2\n    assert x == 3, 'x is wrong'\n"
    )
    answer = call(root, "run_tests", argv=[sys.executable, "-m", "pytest"])
    lines = answer["text"].splitlines()
    assert answer["exit_code"] == 1
    assert lines[0].startswith("FAILED tests/test_app.py::test_bad at tests/test_app.py:7: ")
    assert "x is wrong" in lines[0]
    assert lines[-1] == "1 failed, 1 passed"  # no timing: the same result reads the same every time
    assert len(lines) == 2


def test_run_tests_strips_colour_codes_and_progress_bars(root: Path) -> None:
    script = root / "noisy.py"
    script.write_text(
        "import sys\n"
        "sys.stdout.write('\\x1b[32mcollecting\\x1b[0m\\n')\n"
        "sys.stdout.write('[1/3]\\r[2/3]\\r[3/3] done\\n')\n"
        "sys.stdout.write('\\x1b[31m2 failed\\x1b[0m, 1 passed in 3.21s (0:00:03)\\n')\n"
        "sys.exit(1)\n"
    )
    answer = call(root, "run_tests", argv=[sys.executable, str(script)])
    assert answer["exit_code"] == 1 and "\x1b" not in answer["text"]
    assert "[3/3] done" in answer["text"] and "[1/3]" not in answer["text"]


def test_run_tests_with_a_shell_test_command_keeps_selectors_out_of_the_shell(root: Path) -> None:
    from harness.tools.commands import _test_argv

    (root / "tests" / "test_app.py").write_text(
        "def test_one():\n    assert True\n\n\ndef test_two():\n    assert False\n"
    )
    argv = _test_argv(f"true && {sys.executable} -m pytest")
    assert argv[:2] == ["sh", "-c"]
    answer = call(root, "run_tests", argv=argv, selectors=["tests/test_app.py::test_one", "$(touch pwned)"])
    assert not (root / "pwned").exists()
    answer = call(root, "run_tests", argv=argv, selectors=["tests/test_app.py::test_one"])
    assert answer["exit_code"] == 0 and answer["text"] == "1 passed"


# --- through the real sandbox: registry + gate + DockerSandbox + runner.py/unified_diff.py in the container ---


@pytest.mark.docker
@pytest.mark.timeout(180)
def test_diff_create_delete_rename_through_the_sandbox(box: DockerSandbox, repo_ws: Path) -> None:
    import uuid

    from harness.policy.gate import Gate, GateConfig
    from harness.tools.builtin import default_registry, make_context
    from harness.types import ToolCall
    from sandbox.spec import SandboxSpec

    spec = SandboxSpec(image="py311", timeout_s=20, labels={"harness.test": uuid.uuid4().hex[:8]})
    ctx = make_context(box, repo_ws, spec, Gate(GateConfig(read_only_paths=["tests/"])))
    registry = default_registry()

    def patch(diff: str):
        return registry.execute(ToolCall(id=uuid.uuid4().hex[:6], name="apply_patch", arguments={"diff": diff}), ctx)

    os.symlink("/etc", repo_ws / "etc")  # resolves inside the container, to the container's /etc
    diff = (
        "diff --git a/calc/ops.py b/calc/arith.py\nsimilarity index 90%\nrename from calc/ops.py\n"
        "rename to calc/arith.py\n--- a/calc/ops.py\n+++ b/calc/arith.py\n@@ -1,2 +1,2 @@\n def add(a, b):\n"
        "-    return a - b\n+    return a + b\n"
        "--- a/debug.log\n+++ /dev/null\n@@ -1 +0,0 @@\n-noise\n"
        "diff --git a/calc/mul.py b/calc/mul.py\nnew file mode 100644\n--- /dev/null\n+++ b/calc/mul.py\n"
        "@@ -0,0 +1,2 @@\n+def mul(a, b):\n+    return a * b\n"
    )
    done = patch(diff)
    assert not done.is_error and done.wrote, done.text
    assert done.text == (
        "OK apply_patch: calc/ops.py -> calc/arith.py (renamed, 1 hunk(s)), debug.log (deleted), calc/mul.py (created)"
    )
    assert not (repo_ws / "calc/ops.py").exists() and not (repo_ws / "debug.log").exists()
    assert (repo_ws / "calc/arith.py").read_text().startswith("def add(a, b):\n    return a + b\n")
    assert (repo_ws / "calc/mul.py").read_text() == "def mul(a, b):\n    return a * b\n"
    escapes = {
        "rename into a symlink that leaves /workspace": "diff --git a/calc/mul.py b/etc/mul.py\nrename from calc/mul.py\n"
        "rename to etc/mul.py\n",
        "delete through it": "--- a/etc/hostname\n+++ /dev/null\n@@ -1 +0,0 @@\n-x\n",
        "delete a read-only test": "--- a/tests/test_ops.py\n+++ /dev/null\n@@ -1 +0,0 @@\n-from calc import add\n",
        "create outside": "--- /dev/null\n+++ b/../../tmp/x.py\n@@ -0,0 +1 @@\n+x\n",
    }
    for label, bad in escapes.items():
        refused = patch(bad)
        assert refused.error_kind == "denied", (label, refused.text)
    assert (repo_ws / "calc/mul.py").exists() and (repo_ws / "tests/test_ops.py").exists()


@pytest.mark.docker
@pytest.mark.timeout(120)
def test_the_container_loads_the_runner_bytecode_compiled_on_the_host(box: DockerSandbox, repo_ws: Path) -> None:
    # Compiling runner.py costs about as much as python's start-up: a read_file must not pay it.
    import uuid

    from harness.policy.gate import Gate
    from harness.tools.builtin import make_context
    from harness.tools.launch import RUNNER_ARGV
    from sandbox.spec import SandboxSpec

    spec = SandboxSpec(image="py311", timeout_s=20, labels={"harness.test": uuid.uuid4().hex[:8]})
    ctx = make_context(box, repo_ws, spec, Gate())
    tag = box.run(["python3", "-c", "import sys; print(sys.implementation.cache_tag)"], workspace=repo_ws, spec=spec)
    if tag.stdout.strip() != sys.implementation.cache_tag:
        pytest.skip(f"the image's python ({tag.stdout.strip()}) differs from the host's: it compiles from source")
    request = runner.encode_request({"op": "read_file", "args": {"path": "calc/ops.py"}, "root": "/workspace"})
    verbose = [*RUNNER_ARGV[:-3], "-v", *RUNNER_ARGV[-3:], *request]
    envelope = box.run(verbose, workspace=repo_ws, spec=spec, mounts=ctx.mounts)
    assert envelope.stdout.startswith("OK\n\nOK read_file calc/ops.py: lines 1-6 of 6"), envelope.stderr[-800:]
    cached = f"code object from '/opt/harness/__pycache__/runner.{sys.implementation.cache_tag}.pyc'"
    assert cached in envelope.stderr, envelope.stderr[-800:]


@pytest.mark.docker
@pytest.mark.timeout(120)
def test_run_command_that_changes_nothing_adds_no_session_step(box: DockerSandbox, tmp_path: Path) -> None:
    import uuid

    from harness.policy.gate import Gate, GateConfig
    from harness.tools.builtin import default_registry, make_context
    from harness.types import ToolCall
    from sandbox.session.session import Session
    from sandbox.spec import SandboxSpec

    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "a.txt").write_text("a\n")
    spec = SandboxSpec(image="py311", timeout_s=20, labels={"harness.test": uuid.uuid4().hex[:8]})
    with Session.create(repo, tmp_path / "state", spec=spec) as session:
        ctx = make_context(box, session.workspace, session.spec, Gate(GateConfig(allowed_programs=["ls", "touch"])))
        registry = default_registry()
        steps = []
        for command in ("ls", "ls -la", "touch b.txt", "ls"):
            result = registry.execute(
                ToolCall(id=uuid.uuid4().hex[:6], name="run_command", arguments={"command": command}), ctx
            )
            assert result.wrote and result.envelope.exit_code == 0, result.text
            steps.append(session.commit_step(f"run {command}", skip_unchanged=True).step)
        assert steps == [0, 0, 1, 1] and len(session.records) == 2
        assert session.commit_step("explicit").step == 2, "without skip_unchanged every commit is a step"
