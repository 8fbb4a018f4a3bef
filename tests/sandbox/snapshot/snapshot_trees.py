"""Helpers for snapshot tests: exact tree fingerprints and a repository with every awkward feature."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path


def fingerprint(
    root: Path, *, skip_git: bool = False, skip_empty_dirs: bool = False, exec_only: bool = False
) -> dict[str, tuple]:
    """path -> (type, permission bits, content or link target) for everything under root, never following links."""
    out: dict[str, tuple] = {}
    for folder, dirs, files in os.walk(root, followlinks=False):
        rel_dir = os.path.relpath(folder, root)
        if skip_git:
            dirs[:] = [d for d in dirs if d.lower() != ".git"]
        for name in dirs + files:
            path = os.path.join(folder, name)
            rel = os.path.normpath(os.path.join(rel_dir, name))
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(path))
            elif stat.S_ISDIR(st.st_mode):
                if skip_empty_dirs:
                    continue
                out[rel] = ("dir", stat.S_IMODE(st.st_mode))
            else:
                perm = stat.S_IMODE(st.st_mode)
                out[rel] = ("file", perm & 0o100 if exec_only else perm, Path(path).read_bytes())
    return out


def make_repo(root: Path) -> Path:
    """A git repository with text, binary, symlinks (incl. dangling and to /etc), empty dirs, an ignored
    file, a nested repository and a buried bare one."""
    root.mkdir(parents=True)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"]
    subprocess.run([*git, "init", "-q", str(root)], check=True)
    (root / "src").mkdir()
    (root / "src" / "app.py").write_text("def f():\n    return 1\n")
    (root / "src" / "util.py").write_text("X = 1\n")
    (root / "data.bin").write_bytes(bytes(range(256)) * 8)
    (root / "run.sh").write_text("#!/bin/sh\necho hi\n")
    os.chmod(root / "run.sh", 0o755)
    (root / ".gitignore").write_text("*.log\nbuild/\n")
    (root / "debug.log").write_text("ignored by git, not by us\n")
    (root / "build").mkdir()
    (root / "build" / "out.o").write_bytes(b"\x7fELF\0\0")
    (root / "empty").mkdir()
    os.symlink("src/app.py", root / "link-to-app")
    os.symlink("/etc/passwd", root / "link-to-etc")
    os.symlink("does/not/exist", root / "dangling")
    subprocess.run([*git, "-C", str(root), "add", "-A"], check=True)
    subprocess.run([*git, "-C", str(root), "commit", "-qm", "init"], check=True)
    subprocess.run([*git, "init", "-q", "--bare", str(root / "vendor" / "buried.git")], check=True)
    (root / "vendor" / "inner").mkdir(parents=True)
    subprocess.run([*git, "init", "-q", str(root / "vendor" / "inner")], check=True)
    (root / "vendor" / "inner" / "file.txt").write_text("inner repo\n")
    return root
