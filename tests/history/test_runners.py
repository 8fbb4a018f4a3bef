"""What `tasks check` reads of each runner's output (as the runners in harness's images print it): the
runner a verify command runs, the line that decided a run, whether two runs failed the same way, the
failing tests by name, and the verify command with the broken ones left out."""

from __future__ import annotations

import pytest

from harness.agent.verify import failing_tests
from harness.history.runners import deciding, narrowed, runner_of, same_failure

GO_NO_MODULE = "go: go.mod file not found in current directory or any parent directory; see 'go help modules'\n"
GO_FAIL = "--- FAIL: TestA (0.00s)\n    s_test.go:5: boom\nFAIL\nFAIL\tx\t0.002s\nFAIL\n"
CARGO_FAIL = """running 2 tests
test fine ... ok
test broken ... FAILED

failures:

---- broken stdout ----
thread 'broken' panicked at 'assertion failed: `(left == right)`
  left: `1`,
 right: `2`', tests/t.rs:2:15

failures:
    broken

test result: FAILED. 1 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s

error: test failed, to rerun pass `--test t`
"""
NODE_TAP = """TAP version 13
# Subtest: words
not ok 1 - words
  ---
  duration_ms: 5.160749
  error: |-
    Expected values to be strictly equal:
  name: 'AssertionError'
  ...
# Subtest: ok one
ok 2 - ok one
  ---
  duration_ms: 0.583881
  ...
1..2
# tests 2
# pass 1
# fail 1
"""
MOCHA = """
  calc
    1) adds
    ✓ subtracts
  2) top level

  1 passing (5ms)
  2 failing

  1) calc
       adds:

      AssertionError [ERR_ASSERTION]: Expected values to be strictly equal:

  2) top level:
     Error: boom
"""
JEST = """FAIL tests/ops.test.js
  calc
    ✓ subtracts (2 ms)
    ✕ adds (3 ms)

  ● calc › adds

    expect(received).toBe(expected) // Object.is equality

Tests:       1 failed, 1 passed, 2 total
"""


@pytest.mark.parametrize(
    ("verify", "runner"),
    [
        ("python3 -m pytest -q tests/test_a.py", "pytest"),
        ("go test ./queue", "go"),
        ("go mod init example.com/x >/dev/null 2>&1; go test .", "go"),
        ("go test . && echo done", ""),
        ("cargo test --test halve", "cargo"),
        ("npx --no-install jest tests/a.test.js", "jest"),
        ("npx --no-install vitest run a.test.ts", "vitest"),
        ("npx --no-install mocha test/a.js", "mocha"),
        ("npx --no-install ava test.js", "ava"),
        ("node --test test/words.test.js", "node"),
        ("make test", ""),
        ("sh -c 'unbalanced", ""),
    ],
)
def test_the_runner_of_a_verify_command(verify: str, runner: str) -> None:
    assert runner_of(verify) == runner


def test_each_runner_s_deciding_line_is_the_one_a_person_would_quote() -> None:
    assert deciding(GO_NO_MODULE, "go").startswith("go: go.mod file not found")
    assert deciding(GO_FAIL, "go") == "s_test.go:5: boom"
    assert deciding(CARGO_FAIL, "cargo") == "thread 'broken' panicked at 'assertion failed: `(left == right)`"
    compile_error = "error[E0425]: cannot find function `halve` in crate `rsmath`\n" + CARGO_FAIL
    assert deciding(compile_error, "cargo") == "error[E0425]: cannot find function `halve` in crate `rsmath`"
    assert deciding(JEST, "jest") == "● calc › adds"
    assert deciding(MOCHA, "mocha") == "AssertionError [ERR_ASSERTION]: Expected values to be strictly equal:"
    assert deciding(NODE_TAP, "node") == "error: |-"
    assert deciding("E   assert 1 == 2\nFAILED t.py::test_x - assert 1 == 2\n1 failed in 0.1s\n") == (
        "1 failed in 0.1s"
    )


def test_the_same_failure_at_both_ends_aside_from_timings() -> None:
    assert same_failure(GO_NO_MODULE, GO_NO_MODULE, "go")
    assert same_failure(GO_FAIL, GO_FAIL.replace("0.002s", "0.004s"), "go")
    assert not same_failure(GO_NO_MODULE, GO_FAIL, "go")
    assert not same_failure("", "", "go")


def test_the_failing_tests_of_every_runner_by_name() -> None:
    assert failing_tests(GO_FAIL) == ["TestA"]
    assert failing_tests(CARGO_FAIL) == ["broken"]
    assert failing_tests(NODE_TAP) == ["words"]
    assert failing_tests(MOCHA) == ["adds", "top level"]
    assert failing_tests(JEST) == ["adds"]
    assert failing_tests("  ✘ [fail]: cap capitalises  Difference:\n") == ["cap capitalises"]


def test_the_broken_tests_left_out_as_each_runner_takes_them() -> None:
    assert narrowed("python3 -m pytest -q t.py", "pytest", ["t.py::test_x[a b]"]) == (
        "python3 -m pytest -q t.py --deselect 't.py::test_x[a b]'"
    )
    assert narrowed("go test .", "go", ["TestA", "TestB/sub", "TestB"]) == "go test . -skip '^(TestA|TestB)$'"
    assert narrowed("cargo test --test t", "cargo", ["broken"]) == "cargo test --test t -- --exact --skip broken"
    assert narrowed("npx --no-install jest a.test.js", "jest", ["adds (1+1)"]) == (
        "npx --no-install jest a.test.js --testNamePattern '^(?!.*(?:adds \\(1\\+1\\))$)'"
    )
    assert narrowed("npx --no-install mocha t.js", "mocha", ["adds"]) == (
        "npx --no-install mocha t.js --grep '(?:adds)$' --invert"
    )
    assert narrowed("node --test t.test.js", "node", ["words"], NODE_TAP) == (
        "node --test --test-name-pattern='^(?:ok one)$' t.test.js"
    )
    assert narrowed("node --test t.test.js", "node", ["words"], NODE_TAP.split("\n", 1)[1]) is None, "cut: unknown"
    assert narrowed("npx --no-install ava t.js", "ava", ["x"]) is None
