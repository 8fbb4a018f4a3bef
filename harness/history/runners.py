"""What `tasks check` reads of each test runner a mined task's verify command can run (pytest, go test,
cargo test, jest, vitest, mocha, ava, node --test): which runner it is, the line of its output that
decided a run (what a person would quote), whether two runs failed the same way, and how to run it
with some tests left out by name (the tests the environment breaks at both ends of a task).

Output is the runner's, from a repository nobody trusts: it is only matched, never run or followed.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence

RUNNERS = ("pytest", "go", "cargo", "jest", "vitest", "mocha", "ava", "node")


def runner_of(verify: str) -> str:
    """The runner a verify command runs ("" when none of RUNNERS)."""
    try:
        words = shlex.split(verify)
    except ValueError:
        words = verify.split()
    names = {word.rsplit("/", 1)[-1] for word in words}
    if "pytest" in names or "py.test" in names:
        return "pytest"
    last = re.split(r"[;&|]", verify)[-1].split()  # the command that decides: `go mod init X; go test .`
    if last[:2] == ["go", "test"]:
        return "go"
    if last[:2] == ["cargo", "test"]:
        return "cargo"
    for runner in ("jest", "vitest", "mocha", "ava"):
        if runner in names:
            return runner
    if words[:1] == ["node"] and "--test" in words:
        return "node"
    return ""


_CAUSES: dict[str, tuple[re.Pattern[str], ...]] = {
    "go": (
        re.compile(r"^go: .+$", re.MULTILINE),  # the toolchain refused: no go.mod, a module it cannot get
        re.compile(r"^\S+\.go:\d+:\d+: .+$", re.MULTILINE),  # a compile error
        re.compile(r"^\s+\S+_test\.go:\d+: .+$", re.MULTILINE),  # a test's own failure message
        re.compile(r"^\s*--- FAIL: .+$", re.MULTILINE),
        re.compile(r"^(?:FAIL|ok)\s.+$", re.MULTILINE),
    ),
    "cargo": (
        re.compile(r"^error(?:\[E\d+\])?: (?!test failed).+$", re.MULTILINE),  # a compile error
        re.compile(r"^thread '.+' panicked at .+$", re.MULTILINE),
        re.compile(r"^test \S+ \.\.\. FAILED$", re.MULTILINE),
        re.compile(r"^test result: FAILED.+$", re.MULTILINE),
    ),
    "jest": (
        re.compile(r"^\s*● .+$", re.MULTILINE),
        re.compile(r"^\s*(?:Cannot find module|SyntaxError|TypeError|ReferenceError).+$", re.MULTILINE),
        re.compile(r"^Tests?:.*failed.*$", re.MULTILINE),
    ),
    "mocha": (
        re.compile(r"^\s*(?:AssertionError|Error|TypeError|ReferenceError)\b.*$", re.MULTILINE),
        re.compile(r"^\s*\d+ failing$", re.MULTILINE),
    ),
    "ava": (
        re.compile(r"^\s*✘ .+$", re.MULTILINE),
        re.compile(r"^\s*\d+ tests? failed$", re.MULTILINE),
    ),
    "node": (
        re.compile(r"^\s*(?:error|name): .+$", re.MULTILINE),
        re.compile(r"^\s*not ok \d+ - .+$", re.MULTILINE),
    ),
}
_CAUSES["vitest"] = (re.compile(r"^\s*(?:FAIL|×) .+$", re.MULTILINE), *_CAUSES["jest"])
_GENERIC = re.compile(r"(FAILED|ERROR|Error|failed|--- FAIL)")


def deciding(output: str, runner: str = "") -> str:
    """The line of a run's output that decided it: for a runner known here, the first line of the most
    telling kind it prints (a toolchain's refusal, a compile error, a failure message, then its failure
    markers); else the last line naming a failure or an error; else the last line."""
    text = output or ""
    for pattern in _CAUSES.get(runner, ()):
        found = pattern.search(text)
        if found:
            return found.group().strip()[:300]
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    wanted = [line for line in lines if _GENERIC.search(line)]
    return (wanted or lines or [""])[-1][:300]


_TIMES = re.compile(
    r"\d+(?:\.\d+)?\s*(?:ms|s|µs|us)\b|\(\d+(?:\.\d+)?s\)|0x[0-9a-f]+|/tmp/[\w./-]+|\b[0-9a-f]{12,}\b", re.IGNORECASE
)


def same_failure(before: str, after: str, runner: str = "") -> bool:
    """Two failed runs decided by the same line (timings, addresses and scratch paths aside)."""
    one, other = deciding(before, runner), deciding(after, runner)
    return bool(one) and _TIMES.sub("·", one) == _TIMES.sub("·", other)


_TAP = re.compile(r"^\s*(?:not )?ok \d+ - (.+?)(?: # .*)?$", re.MULTILINE)


def narrowed(verify: str, runner: str, names: Sequence[str], output: str = "") -> str | None:
    """verify with the named tests left out, in the runner's own way; None when it has none harness
    knows. `node --test` matches its name pattern against each file's own test too, so a pattern that
    leaves tests out keeps them all: it is given the tests it ran (output: a run of verify) but those."""
    if not names:
        return verify
    if runner == "node":
        if not re.search(r"^TAP version \d+$", output, re.MULTILINE):
            return None  # the run's beginning was cut from what was kept: not every test it ran is known
        kept = sorted({found.group(1).strip() for found in _TAP.finditer(output)} - set(names))
        if not kept or " --test" not in f" {verify}":
            return None
        pattern = "^(?:" + "|".join(_js_escape(name) for name in kept) + ")$"
        head, _, tail = verify.partition("--test")
        return f"{head}--test --test-name-pattern={shlex.quote(pattern)}{tail}"
    if runner == "pytest":
        return verify + "".join(f" --deselect {shlex.quote(name)}" for name in names)
    if runner == "go":  # -skip: Go 1.20 on; one level (a subtest's parent failed with it)
        top = sorted({name.split("/", 1)[0] for name in names})
        return f"{verify} -skip {shlex.quote('^(' + '|'.join(re.escape(name) for name in top) + ')$')}"
    if runner == "cargo":
        rest = "".join(f" --skip {shlex.quote(name)}" for name in names)
        return f"{verify} --exact{rest}" if " -- " in f"{verify} " else f"{verify} -- --exact{rest}"
    if runner in ("jest", "vitest"):  # a test's full name is its describe blocks' and its own
        pattern = "^(?!.*(?:" + "|".join(_js_escape(name) for name in names) + ")$)"
        return f"{verify} --testNamePattern {shlex.quote(pattern)}"
    if runner == "mocha":
        pattern = "(?:" + "|".join(_js_escape(name) for name in names) + ")$"
        return f"{verify} --grep {shlex.quote(pattern)} --invert"
    return None


def _js_escape(text: str) -> str:
    """text as a literal in a JavaScript regular expression."""
    return re.sub(r"[.*+?^${}()|[\]\\/]", lambda found: "\\" + found.group(), text)
