#!/usr/bin/env python3
"""Write examples/mathlib.bundle: a small Python package with a dozen commits of real history (bug
fixes with their tests, a feature with new tests, a cross-file change, a dependency change, a docs
edit, a tests-only commit, a lockfile bump, a merge, and a refactor whose tests pass either way).

It builds the repository in a temporary folder with `git` (our own fresh repository, fixed dates
and identity), then bundles it. `harness tasks mine examples/mathlib.bundle` reads the bundle with
dulwich; nothing runs git at mine time. Run again only to change the example."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "examples" / "mathlib.bundle"
STAMP = [1_700_000_000]


def git(repo: Path, *args: str) -> str:
    STAMP[0] += 3600
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(repo),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_AUTHOR_NAME": "Ada Example",
        "GIT_AUTHOR_EMAIL": "ada@example.invalid",
        "GIT_COMMITTER_NAME": "Ada Example",
        "GIT_COMMITTER_EMAIL": "ada@example.invalid",
        "GIT_AUTHOR_DATE": f"{STAMP[0]} +0000",
        "GIT_COMMITTER_DATE": f"{STAMP[0]} +0000",
    }
    return subprocess.run(["git", "-C", str(repo), *args], env=env, check=True, capture_output=True, text=True).stdout


def write(repo: Path, files: dict[str, str]) -> None:
    for path, text in files.items():
        target = repo / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)


def commit(repo: Path, message: str, files: dict[str, str]) -> None:
    write(repo, files)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)


OPS = '''"""Arithmetic."""


def add(a, b):
    return a - b


def subtract(a, b):
    return a - b


def multiply(a, b):
    return a * b
'''
STATS = '''"""Statistics over lists of numbers."""

from mathlib.ops import add


def total(values):
    result = 0
    for value in values:
        result = add(result, value)
    return result


def mean(values):
    return total(values) / len(values)
'''
TEXT = '''"""Text helpers."""


def title(text):
    return text.title()
'''
TEST_OPS = """from mathlib.ops import multiply, subtract


def test_subtract():
    assert subtract(5, 3) == 2


def test_multiply():
    assert multiply(4, 3) == 12
"""
PYPROJECT = """[project]
name = "mathlib"
version = "0.1.0"
dependencies = []
"""


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "mathlib"
        repo.mkdir()
        git(repo, "init", "-q", "-b", "main")
        commit(
            repo,
            "Start mathlib: arithmetic, statistics and text helpers",
            {
                "README.md": "# mathlib\n\nSmall helpers.\n",
                "pyproject.toml": PYPROJECT,
                "mathlib/__init__.py": "",
                "mathlib/ops.py": OPS,
                "mathlib/stats.py": STATS,
                "mathlib/text.py": TEXT,
                "tests/test_ops.py": TEST_OPS,
            },
        )
        commit(
            repo,
            "Fix add() subtracting instead of adding\n\nadd(2, 3) returned -1. It must return the sum.\n\n"
            "Signed-off-by: Ada Example <ada@example.invalid>\n",
            {
                "mathlib/ops.py": OPS.replace("def add(a, b):\n    return a - b", "def add(a, b):\n    return a + b"),
                "tests/test_ops.py": TEST_OPS.replace("import multiply, subtract", "import add, multiply, subtract")
                + "\n\ndef test_add():\n    assert add(2, 3) == 5\n",
            },
        )
        commit(
            repo,
            "Document the helpers in the README",
            {"README.md": "# mathlib\n\nSmall helpers: `add`, `subtract`, `multiply`, `mean`, `title`.\n"},
        )
        stats = STATS.replace(
            "def mean(values):\n    return total(values) / len(values)",
            'def mean(values):\n    if not values:\n        raise ValueError("mean() of no values")\n'
            "    return total(values) / len(values)",
        )
        commit(
            repo,
            "mean() of an empty list raises ValueError\n\nIt raised ZeroDivisionError, which says nothing "
            "about what went wrong. For example:\n\n    mean([])  # ZeroDivisionError\n\nNow it is a ValueError "
            "naming the problem.\n",
            {
                "mathlib/stats.py": stats,
                "tests/test_stats.py": "import pytest\n\nfrom mathlib.stats import mean\n\n\ndef test_mean():\n"
                "    assert mean([1, 2, 3]) == 2\n\n\ndef test_mean_of_nothing():\n"
                "    with pytest.raises(ValueError):\n        mean([])\n",
            },
        )
        commit(
            repo,
            "Test multiply with zero",
            {
                "tests/test_ops.py": (repo / "tests/test_ops.py").read_text()
                + "\n\ndef test_multiply_by_zero():\n    assert multiply(7, 0) == 0\n"
            },
        )
        stats += (
            "\n\ndef median(values):\n    ordered = sorted(values)\n    middle = len(ordered) // 2\n"
            "    if len(ordered) % 2:\n        return ordered[middle]\n"
            "    return (ordered[middle - 1] + ordered[middle]) / 2\n"
        )
        commit(
            repo,
            "Add median()\n\nThe middle value of a list; the mean of the two middle values when the list "
            "has an even length.\n",
            {
                "mathlib/stats.py": stats,
                "tests/test_median.py": "from mathlib.stats import median\n\n\ndef test_odd():\n"
                "    assert median([3, 1, 2]) == 2\n\n\ndef test_even():\n"
                "    assert median([4, 1, 3, 2]) == 2.5\n",
            },
        )
        git(repo, "checkout", "-q", "-b", "clamp")
        commit(
            repo,
            "Add clamp()",
            {
                "mathlib/ops.py": (repo / "mathlib/ops.py").read_text()
                + "\n\ndef clamp(value, low, high):\n    return max(low, min(value, high))\n"
            },
        )
        git(repo, "checkout", "-q", "main")
        git(repo, "merge", "-q", "--no-ff", "-m", "Merge the clamp branch", "clamp")
        commit(
            repo,
            'title() keeps apostrophes inside words\n\ntitle("don\'t stop") gave "Don\'T Stop".\n',
            {
                "mathlib/text.py": TEXT.replace(
                    "return text.title()",
                    'return " ".join(word[:1].upper() + word[1:].lower() for word in text.split(" "))',
                ),
                "tests/test_text.py": "from mathlib.text import title\n\n\ndef test_title():\n"
                '    assert title("hello world") == "Hello World"\n\n\n'
                'def test_apostrophe():\n    assert title("don\'t stop") == "Don\'t Stop"\n',
            },
        )
        commit(repo, "Pin the build backend", {"uv.lock": 'version = 1\n\n[[package]]\nname = "mathlib"\n'})
        ops = (
            (repo / "mathlib/ops.py").read_text() + "\n\ndef rounded(value, digits=None):\n"
            "    return value if digits is None else round(value, digits)\n"
        )
        stats_now = (
            (repo / "mathlib/stats.py")
            .read_text()
            .replace("from mathlib.ops import add", "from mathlib.ops import add, rounded")
            .replace("def mean(values):", "def mean(values, digits=None):")
            .replace(
                "    return total(values) / len(values)", "    return rounded(total(values) / len(values), digits)"
            )
        )
        commit(
            repo,
            "mean() takes digits= to round its result\n\nRounding lives in ops.rounded() so other helpers "
            "can share it.\n",
            {
                "mathlib/ops.py": ops,
                "mathlib/stats.py": stats_now,
                "tests/test_stats.py": (repo / "tests/test_stats.py").read_text()
                + "\n\ndef test_mean_rounded():\n    assert mean([1, 2, 2], digits=2) == 1.67\n",
            },
        )
        commit(
            repo,
            'Parse numbers written with thousands separators\n\nparse_number("1,234.5") is 1234.5. '
            "Declares the new module's entry point in pyproject.toml.\n",
            {
                "mathlib/parse.py": '"""Reading numbers from text."""\n\n\ndef parse_number(text):\n'
                '    return float(text.replace(",", ""))\n',
                "pyproject.toml": PYPROJECT + '\n[project.scripts]\nparse-number = "mathlib.parse:parse_number"\n',
                "tests/test_parse.py": "from mathlib.parse import parse_number\n\n\ndef test_separators():\n"
                '    assert parse_number("1,234.5") == 1234.5\n',
            },
        )
        commit(
            repo,
            "Name the loop variable in total() for what it is",
            {
                "mathlib/stats.py": (repo / "mathlib/stats.py")
                .read_text()
                .replace(
                    "    for value in values:\n        result = add(result, value)",
                    "    for number in values:\n        result = add(result, number)",
                ),
                "tests/test_stats.py": (repo / "tests/test_stats.py").read_text()
                + "\n\ndef test_total_of_one():\n    assert mean([5]) == 5\n",
            },
        )
        OUT.unlink(missing_ok=True)
        git(repo, "bundle", "create", "-q", str(OUT), "main")
        print(git(repo, "log", "--oneline", "--first-parent"), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
