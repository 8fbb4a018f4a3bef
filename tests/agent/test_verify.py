from pathlib import Path

from harness.agent.verify import failing_tests, feedback, result_from_envelope
from sandbox.envelope import Envelope, Posture

POSTURE = Posture(
    runtime="runc",
    network="none",
    read_only_root=True,
    user="10001:10001",
    cpus=1,
    memory=2**30,
    pids=256,
    timeout_s=120,
    tmpfs=2**28,
)
PYTEST_OUT = """\
F.F.                                                                     [100%]
=================================== FAILURES ===================================
___________________________________ test_add ___________________________________
E       assert -1 == 5
=========================== short test summary info ============================
FAILED tests/test_ops.py::test_add - assert -1 == 5
FAILED tests/test_ops.py::test_mean - assert -2.5 == 2.5
2 failed, 2 passed in 0.05s
"""


def envelope(code: int, stdout: str) -> Envelope:
    return Envelope(
        exit_code=code,
        status="ok" if code == 0 else "exit_nonzero",
        duration_ms=5,
        stdout=stdout,
        stderr="",
        limits=POSTURE,
        image_id="sha256:x",
        runtime="runc",
    )


def test_pytest_failures_are_extracted_sorted():
    assert failing_tests(PYTEST_OUT) == ["tests/test_ops.py::test_add", "tests/test_ops.py::test_mean"]


def test_other_runners():
    assert failing_tests("FAIL: test_x (pkg.tests.T)\n") == ["test_x (pkg.tests.T)"]
    spaced = (
        "FAILED tests/test_a.py::test_x[a b] - AssertionError: assert 1 == 2\n"
        "FAILED tests/test_a.py::TestK::test_z[with - dash]\nERROR tests/test_b.py - ModuleNotFoundError: x\n"
    )
    assert failing_tests(spaced) == [
        "tests/test_a.py::TestK::test_z[with - dash]", "tests/test_a.py::test_x[a b]", "tests/test_b.py",
    ], "parameters with spaces are kept whole"  # fmt: skip
    assert failing_tests("    --- FAIL: TestAdd (0.00s)\n") == ["TestAdd"]


def test_only_exit_zero_counts():
    assert result_from_envelope("pytest", envelope(0, "4 passed")).passed
    failed = result_from_envelope("pytest", envelope(1, PYTEST_OUT))
    assert not failed.passed and len(failed.failing) == 2
    unparsed = result_from_envelope("make check", envelope(2, "boom"))
    assert unparsed.failing == ["exit 2 (exit_nonzero)"]


def test_feedback_is_structured_for_the_model():
    text = feedback(result_from_envelope("python3 -m pytest -q", envelope(1, PYTEST_OUT)), 1, 3)
    assert text.startswith("VERIFICATION FAILED (round 1 of 3): `python3 -m pytest -q` exited 1")
    assert "- tests/test_ops.py::test_add" in text and "I am not sure" in text


def test_the_verify_command_is_detected_from_the_layout(tmp_path):
    from harness.agent.verify import detect_verify

    def repo(name: str, files: dict[str, str]) -> Path:
        root = tmp_path / name
        for path, text in files.items():
            (root / path).parent.mkdir(parents=True, exist_ok=True)
            (root / path).write_text(text)
        root.mkdir(exist_ok=True)
        return root

    assert detect_verify(repo("py", {"tests/test_a.py": "", "pyproject.toml": "[tool.pytest.ini_options]\n"})) == (
        "python3 -m pytest -q",
        "Python tests (tests/test_*.py and pyproject.toml)",
    )
    assert detect_verify(repo("npm", {"package.json": '{"scripts": {"test": "jest"}}'}))[0] == "npm test --silent"
    placeholder = '{"scripts": {"test": "echo \\"Error: no test specified\\" && exit 1"}}'
    assert detect_verify(repo("npm0", {"package.json": placeholder})) is None
    assert detect_verify(repo("go", {"go.mod": "module x\n"})) == ("go test ./...", "go.mod")
    assert detect_verify(repo("rs", {"Cargo.toml": "[package]\n"})) == ("cargo test", "Cargo.toml")
    assert detect_verify(repo("mk", {"Makefile": "all:\n\ttrue\ntest:\n\ttrue\n"}))[0] == "make test"
    assert detect_verify(repo("none", {"README.md": "hi"})) is None
    linked = repo("link", {})
    (tmp_path / "elsewhere.json").write_text('{"scripts": {"test": "jest"}}')
    (linked / "package.json").symlink_to(tmp_path / "elsewhere.json")
    assert detect_verify(linked) is None  # never read through a symlink
