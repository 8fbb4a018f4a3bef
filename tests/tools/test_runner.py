"""The in-container runner, executed here with the host python against a temp dir as its root."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.tools import runner


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
    return runner.handle({"op": op, "args": args, "root": str(root), "read_only": ["tests/"],
                          "protected": [".git/", ".harness/"], "max_bytes": 24000})


def test_script_protocol_argv_and_stdin(root: Path) -> None:
    request = {"op": "read_file", "args": {"path": "src/app.py", "start_line": 2, "end_line": None},
               "root": str(root), "protected": [".git/"], "read_only": []}
    items = runner.encode_request(request)
    assert runner.decode_request(items) == {"op": "read_file", "args": {"path": "src/app.py", "start_line": "2"},
                                            "root": str(root), "protected": [".git/"]}
    by_argv = subprocess.run([sys.executable, "-I", "-S", runner.__file__, *items], capture_output=True, check=True)
    by_stdin = subprocess.run([sys.executable, "-I", "-S", runner.__file__, "--stdin"],
                              input=json.dumps(request).encode(), capture_output=True, check=True)
    assert by_argv.stdout == by_stdin.stdout
    answer = runner.parse_answer(by_argv.stdout.decode())
    assert answer == {"ok": True, "kind": None, "wrote": [],
                      "text": "OK read_file src/app.py: lines 2-6 of 6\n     2\t    return 1\n     3\t\n     4\t\n"
                              "     5\tdef g():\n     6\t    return 1"}
    denied = subprocess.run([sys.executable, "-I", "-S", runner.__file__,
                             *runner.encode_request({**request, "args": {"path": ".git/config"}})], capture_output=True)
    assert runner.parse_answer(denied.stdout.decode())["kind"] == "denied"


def test_read_path_does_not_import_json_or_re(root: Path) -> None:
    items = runner.encode_request({"op": "read_file", "args": {"path": "src/app.py"}, "root": str(root),
                                   "protected": [".git/", ".harness/"], "read_only": ["tests/"]})
    out = subprocess.run([sys.executable, "-I", "-S", "-X", "importtime", runner.__file__, *items],
                         capture_output=True, text=True, check=True)
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
    ok = call(root, "apply_patch", path="src/app.py", old_text="def g():\n    return 1\n", new_text="def g():\n    return 2\n")
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
    assert runner.diff_paths(diff) == ["src/app.py", "src/app.py", "src/new.py"]


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
    for op, args in (("read_file", {"path": "linkdir/secret"}), ("read_file", {"path": "link.txt"}),
                     ("list_dir", {"path": "linkdir"}),
                     ("write_file", {"path": "linkdir/new", "content": "x"}),
                     ("write_file", {"path": "link.txt", "content": "x", "overwrite": True})):
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
    space = runner.Space({"root": str(root)})
    rel = space.resolve("src/app.py", write=True)  # the check passes...
    os.rename(root / "src", root / "src.real")
    os.symlink(outside, root / "src")  # ...then a directory on the path becomes a symlink
    with pytest.raises(runner.Failure) as refused:
        space.write_bytes(rel, b"pwned")
    assert refused.value.kind == "denied"
    with pytest.raises(runner.Failure):
        space.read_bytes(rel)
    assert list(outside.iterdir()) == []


def test_run_tests_reports_only_failures(root: Path) -> None:
    (root / "tests" / "test_app.py").write_text(
        "def test_ok():\n    assert 1\n\n\ndef test_bad():\n    x = 2\n    assert x == 3, 'x is wrong'\n")
    answer = call(root, "run_tests", argv=[sys.executable, "-m", "pytest"])
    lines = answer["text"].splitlines()
    assert answer["exit_code"] == 1
    assert lines[0].startswith("FAILED tests/test_app.py::test_bad at tests/test_app.py:7: ")
    assert "x is wrong" in lines[0]
    assert lines[-1].startswith("1 failed, 1 passed")
    assert len(lines) == 2



def test_run_tests_with_a_shell_test_command_keeps_selectors_out_of_the_shell(root: Path) -> None:
    from harness.tools.builtin import _test_argv

    (root / "tests" / "test_app.py").write_text("def test_one():\n    assert True\n\n\ndef test_two():\n    assert False\n")
    argv = _test_argv(f"true && {sys.executable} -m pytest")
    assert argv[:2] == ["sh", "-c"]
    answer = call(root, "run_tests", argv=argv, selectors=["tests/test_app.py::test_one", "$(touch pwned)"])
    assert not (root / "pwned").exists()
    answer = call(root, "run_tests", argv=argv, selectors=["tests/test_app.py::test_one"])
    assert answer["exit_code"] == 0 and answer["text"].startswith("1 passed")
