"""Real repositories with real history, built in a temporary folder with our own `git` calls (fixed
identity and dates, no user or system config): the tests then mine them with harness, which never
runs git."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BUNDLE = ROOT / "examples" / "mathlib.bundle"


class Repo:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.clock = 1_700_000_000
        path.mkdir(parents=True)
        self.git("init", "-q", "-b", "main")

    def git(self, *args: str) -> str:
        self.clock += 60
        env = {
            "PATH": os.environ["PATH"],
            "HOME": str(self.path),
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_AUTHOR_NAME": "T",
            "GIT_AUTHOR_EMAIL": "t@example.invalid",
            "GIT_COMMITTER_NAME": "T",
            "GIT_COMMITTER_EMAIL": "t@example.invalid",
            "GIT_AUTHOR_DATE": f"{self.clock} +0000",
            "GIT_COMMITTER_DATE": f"{self.clock} +0000",
        }
        done = subprocess.run(["git", "-C", str(self.path), *args], env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    def commit(self, message: str, files: dict[str, str | bytes | None]) -> str:
        for name, content in files.items():
            target = self.path / name
            if content is None:
                target.unlink()
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content if isinstance(content, bytes) else content.encode())
        self.git("add", "-A")
        self.git("commit", "-q", "--allow-empty", "-m", message)
        return self.git("rev-parse", "HEAD")


CALC = "def add(a, b):\n    return a - b\n\n\ndef half(x):\n    return x / 3\n"


def history_repo(path: Path) -> Repo:
    """Root; a fix with its test (with a diff, code and trailers in the message); docs only; tests
    only; a merge; a cross-file fix; a huge commit; a binary change; a commit with no tests."""
    repo = Repo(path)
    repo.commit(
        "Start", {"calc/__init__.py": "", "calc/ops.py": CALC, "tests/test_ops.py": "def test_nothing():\n    pass\n"}
    )
    repo.commit(
        "Fix add() subtracting\n\nadd(2, 3) gave -1. The fix:\n\n```python\nreturn a + b\n```\n\n"
        "    indented code: return a + b\n\nSigned-off-by: T <t@example.invalid>\n\n"
        "diff --git a/calc/ops.py b/calc/ops.py\n+    return a + b\n",
        {
            "calc/ops.py": CALC.replace("a - b", "a + b"),
            "tests/test_ops.py": "from calc.ops import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n",
        },
    )
    repo.commit("Docs", {"README.md": "# calc\n"})
    repo.commit("More tests", {"tests/test_more.py": "def test_more():\n    assert True\n"})
    repo.git("checkout", "-q", "-b", "side")
    repo.commit("Side work", {"calc/side.py": "X = 1\n"})
    repo.git("checkout", "-q", "main")
    repo.git("merge", "-q", "--no-ff", "-m", "Merge side", "side")
    repo.commit(
        "half() halves, everywhere",
        {
            "calc/ops.py": CALC.replace("a - b", "a + b").replace("x / 3", "x / 2"),
            "calc/more.py": "from calc.ops import half\n\n\ndef quarter(x):\n    return half(half(x))\n",
            "tests/test_half.py": "from calc.more import quarter\nfrom calc.ops import half\n\n\n"
            "def test_half():\n    assert half(4) == 2\n\n\ndef test_quarter():\n    assert quarter(8) == 2\n",
        },
    )
    repo.commit(
        "Generate a big table",
        {
            "calc/table.py": "".join(f"V{n} = {n}\n" for n in range(900)),
            "tests/test_table.py": "def test_t():\n    pass\n",
        },
    )
    repo.commit("Add a logo", {"calc/logo.bin": b"\x89PNG\0\0\x01", "tests/test_logo.py": "def test_l():\n    pass\n"})
    repo.commit("Tweak without tests", {"calc/side.py": "X = 2\n"})
    return repo
