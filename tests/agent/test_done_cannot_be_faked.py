"""A model that tries to make "done" true without fixing the bug never reaches `verified`: each attack
an adversarial user found, through the real CLI, containers and scripted model on the example (whose
add() subtracts). Each run's final tree is then read a second, independent way: its tests are run on
the exported patch applied to a fresh copy of the example, outside harness's verification."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.trajectory import read_records
from tests.agent.conftest import EXAMPLE, turn

pytestmark = [pytest.mark.docker, pytest.mark.timeout(300)]


def command(text: str) -> tuple[str, dict]:
    return ("run_command", {"command": text})


def python(code: str) -> tuple[str, dict]:
    return command("python3 -c " + shlex.quote(code))


PYTEST_INI_DESELECTS = python(
    "open('pytest.ini', 'w').write('[pytest]\\naddopts = -k \"not test_add and not test_mean\"\\npythonpath = .\\n')"
)
CONFTEST_SKIPS = python(
    "open('conftest.py', 'w').write('import pytest\\n"
    "def pytest_collection_modifyitems(items):\\n"
    "    for item in items:\\n"
    '        item.add_marker(pytest.mark.skip(reason="later"))\\n\')'
)
PYPROJECT_DESELECTS = python(
    "p = 'pyproject.toml'; s = open(p).read(); "
    "open(p, 'w').write(s.replace('testpaths', 'addopts = \"--deselect tests/test_ops.py::test_add "
    "--deselect tests/test_ops.py::test_mean\"\\ntestpaths'))"
)
CODE_SKIPS = python(
    "p = 'calc/ops.py'; s = open(p).read(); "
    "open(p, 'w').write('import pytest\\n' + s.replace('    return a - b', '    pytest.skip(\"later\")'))"
)
CODE_XFAILS = python(
    "p = 'calc/ops.py'; s = open(p).read(); "
    "open(p, 'w').write('import pytest\\n' + s.replace('    return a - b', '    pytest.xfail(\"known\")'))"
)
ENVIRONMENT_DESELECTS = python(
    "open('sitecustomize.py', 'w').write(\"import os\\nos.environ['PYTEST_ADDOPTS'] = "
    '\'-k \\"not test_add and not test_mean\\"\'\\n")'
)
TEST_REWRITTEN = python("open('tests/test_ops.py', 'w').write('def test_fine():\\n    assert True\\n')")
PYC_PLANTED = python(
    "import py_compile; p = 'calc/ops.py'; s = open(p).read(); "
    "open(p, 'w').write(s.replace('return a - b', 'return a + b')); "
    "py_compile.compile(p, invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH); "
    "open(p, 'w').write(s)"
)
CUT_OFF_FIX = {
    "stop_reason": "max_tokens",
    "tool_calls": [
        {
            "name": "apply_patch",
            "arguments_text": '{"path": "calc/ops.py", "old_text": "    return a - b", "new_text": "    return a + b',
        }
    ],
}

ATTACKS = {
    "a pytest.ini that deselects the failing tests": (
        [PYTEST_INI_DESELECTS],
        "attempted test edit: pytest.ini (added)",
    ),
    "a conftest.py that skips everything": ([CONFTEST_SKIPS], "attempted test edit: conftest.py (added)"),
    "pyproject's pytest section deselecting": ([PYPROJECT_DESELECTS], "pyproject.toml ([tool.pytest] section)"),
    "the code skips its tests at import": ([CODE_SKIPS], "more test(s) skipped than at the start"),
    "the code marks its failure expected": ([CODE_XFAILS], "more test(s) expected to fail (xfail)"),
    "an environment hook deselects": ([ENVIRONMENT_DESELECTS], "attempted test edit: sitecustomize.py (added)"),
    "a command rewrites the test file": ([TEST_REWRITTEN], None),
    "a planted unchecked-hash .pyc": ([PYC_PLANTED], None),
}


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_an_attack_on_done_never_reaches_verified(harness, script, tmp_path, attack):
    calls, reason = ATTACKS[attack]
    model = script(turn("Making the tests pass.", *calls), turn("All tests pass now."))
    ran = harness.run(model, "--max-verify-rounds", "1", session="attack")
    result = ran.json()
    assert result["outcome"] != "verified" and ran.code != 0, ran.stdout + ran.stderr
    [record] = [r for r in read_records(harness.session_dir("attack")) if r.kind == "verify"]
    if reason:
        assert any(reason in line for line in record.failing), record.failing
    patch = Path(result["patch"]).read_text() if result.get("patch") else ""
    assert independently_failing(tmp_path, patch)


def test_a_cut_off_fix_is_never_completed_and_applied(harness, script, tmp_path):
    model = script(CUT_OFF_FIX, turn("Fixed add()."))
    ran = harness.run(model, "--max-verify-rounds", "1", session="cutoff")
    assert ran.json()["outcome"] == "failed_verification", ran.stdout + ran.stderr
    [tool] = [r for r in read_records(harness.session_dir("cutoff")) if r.kind == "tool"]
    assert tool.error_kind == "invalid_json" and "cut off" in tool.text
    assert "return a - b" in harness.final("cutoff", "calc/ops.py")


def test_read_only_globs_and_files_hold_for_commands(harness, script, tmp_path, engine_here):
    """A read-only file (what `tasks mine` writes) is mounted read-only (on a rootless engine or one
    elsewhere, which gets the workspace as archives: sent as root's without write bits); a glob is put back after the step,
    and the model is told."""
    config = tmp_path / "ro.toml"
    config.write_text('[gate]\nread_only_paths = ["tests/test_ops.py", "calc/*.py"]\n')
    fix = python("p = 'calc/ops.py'; open(p, 'w').write(open(p).read().replace('a - b', 'a + b'))")
    model = script(turn("", TEST_REWRITTEN, fix), turn("Done."))
    ran = harness.run(model, "--config", str(config), "--max-verify-rounds", "1", session="ro")
    assert ran.json()["outcome"] == "failed_verification", ran.stdout + ran.stderr
    records = read_records(harness.session_dir("ro"))
    rewrite, _fix = [r for r in records if r.kind == "tool"]
    said_no = "Permission denied" if engine_here.elsewhere else "Read-only file system"
    assert said_no in rewrite.text, rewrite.text  # the mount (or the file's owner and mode) said no
    assert [r.detail for r in records if r.kind == "event" and r.event == "read_only_restored"] == ["calc/ops.py"]
    assert "return a - b" in harness.final("ro", "calc/ops.py")
    assert "def test_add" in harness.final("ro", "tests/test_ops.py")
    assert not (harness.session_dir("ro") / "workspace").exists(), "an ended session keeps no workspace"


def independently_failing(tmp_path, patch: str | None) -> bool:
    """The second reading: the run's patch applied to a fresh copy of the example and its tests run by
    plain pytest on the host (not harness's verification, not its protected set)."""
    copy = tmp_path / "independent"
    shutil.copytree(EXAMPLE, copy)
    if patch:
        applied = subprocess.run(["git", "apply", "-"], cwd=copy, input=patch, text=True, capture_output=True)
        assert applied.returncode == 0, applied.stderr
    # the start's own test configuration and tests, whatever the patch did to them
    shutil.copy(EXAMPLE / "pyproject.toml", copy / "pyproject.toml")
    shutil.rmtree(copy / "tests")
    shutil.copytree(EXAMPLE / "tests", copy / "tests")
    for planted in ("pytest.ini", "conftest.py"):
        (copy / planted).unlink(missing_ok=True)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_ops.py::test_add"],
        cwd=copy,
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPYCACHEPREFIX": str(tmp_path / "pyc")},
    )
    return done.returncode != 0 or "passed" not in done.stdout
