"""What a mined task's setup is, from its start state: a Python package installed only when its
tests cannot import it from the root, requirement files without the old test-runner pins that would
replace the image's pytest, a Node project's install, a Go module's download only when it requires
modules; with the language's registry preset and the user's hosts and CA bundle. And the causes a
check names when setup was missing: the test runner npx could not fetch, Go modules never downloaded."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from harness.history.diagnose import diagnose
from harness.history.environment import older_than
from harness.history.prepare import SetupPolicy, declared, setup_keys


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


@pytest.mark.parametrize(
    ("files", "language", "installs_package", "requirement_files"),
    [
        ({"setup.py": "from setuptools import setup\nsetup(name='x')\n", "x/__init__.py": ""}, "python", False, []),
        ({"setup.py": "setup(name='x', install_requires=['six'])\n"}, "python", True, []),
        ({"pyproject.toml": "[project]\nname = 'x'\ndependencies = [\n  'attrs',\n]\n"}, "python", True, []),
        ({"pyproject.toml": "[project]\nname = 'x'\n", "src/x/__init__.py": ""}, "python", True, []),
        ({"requirements-dev.txt": "pytest==2.2.3\nhypothesis\n"}, "python", False, ["requirements-dev.txt"]),
    ],
)
def test_python_installs_only_what_its_tests_need(
    tmp_path: Path, files: dict[str, str], language: str, installs_package: bool, requirement_files: list[str]
) -> None:
    commands = declared(_tree(tmp_path, files), language)
    assert ("python3 -m pip install -e ." in commands) == installs_package, commands
    assert [c for c in commands if "-r /tmp/harness-" in c] == [
        c for c in commands if any(f"> /tmp/harness-{name};" in c for name in requirement_files)
    ]
    assert len(commands) == installs_package + len(requirement_files)


def test_old_test_runner_pins_are_left_out_and_the_rest_kept(tmp_path: Path) -> None:
    root = _tree(tmp_path, {"requirements.txt": "py==1.4.7\npytest==2.2.3\nPytest-Cov>=2\nrequests==2.0\n"
                            "pyyaml ; python_version > '3'\npytz\n"})  # fmt: skip
    [command] = declared(root, "python")
    filtering = command.split("; python3 -m pip")[0].replace(
        "/tmp/harness-requirements.txt", str(tmp_path / "kept.txt")
    )
    subprocess.run(["sh", "-c", filtering], cwd=root, check=False)
    assert (tmp_path / "kept.txt").read_text().splitlines() == [
        "requests==2.0",
        "pyyaml ; python_version > '3'",
        "pytz",
    ]


def test_other_languages_and_the_network_that_goes_with_a_setup(tmp_path: Path) -> None:
    node = _tree(tmp_path / "node", {"package.json": '{"devDependencies": {"ava": "^5"}}', "package-lock.json": "{}"})
    assert declared(node, "javascript") == ["npm ci"]
    free = _tree(tmp_path / "free", {"go.mod": "module example.com/free\n\ngo 1.19\n"})
    assert declared(free, "go") == [], "a module-free Go library needs no setup (and no network)"
    needs = _tree(tmp_path / "needs", {"go.mod": "module example.com/n\n\nrequire github.com/x/y v1.0.0\n"})
    assert declared(needs, "go") == ["go mod download"]
    bundle = tmp_path / "ca.pem"
    policy = SetupPolicy(allow_net=["203.0.113.80"], ca_bundle=bundle, timeout_s=300)
    assert setup_keys(node, "javascript", policy) == {
        "setup": ["npm ci"], "allow_net": ["npm", "203.0.113.80"], "ca_bundle": str(bundle), "setup_timeout": 300,
    }  # fmt: skip
    assert setup_keys(free, "go", policy) == {}
    assert setup_keys(node, "javascript", SetupPolicy(commands=["none"])) == {}
    assert setup_keys(node, "javascript", SetupPolicy(commands=["make deps"]))["setup"] == ["make deps"]


def test_the_causes_a_missing_setup_leaves() -> None:
    npx = (
        "npm ERR! code EAI_AGAIN\nnpm ERR! syscall getaddrinfo\n"
        "npm ERR! request to https://registry.npmjs.org/ava failed, reason: getaddrinfo EAI_AGAIN registry.npmjs.org\n"
    )
    found = diagnose(npx, 1)
    assert found is not None and found.kind == "runner_missing" and "(ava)" in found.reason
    go = "# example.com/n\na_test.go:5:2: missing go.sum entry for module providing package github.com/x/y/z\n"
    found = diagnose(go, 1)
    assert found is not None and found.kind == "needs_modules" and "github.com/x/y/z" in found.reason
    download = (
        "go: downloading github.com/x/y v1.0.0\na_test.go:5:2: mkdir /opt/go/pkg/mod/cache: read-only file system\n"
    )
    found = diagnose(download, 1)
    assert found is not None and found.kind == "needs_modules", "the module, not the read-only cache it hit"


def test_an_environment_of_the_commits_time() -> None:
    assert older_than("python", "3.11.2", "2019-10-11") == "<3.11"
    assert older_than("python", "3.11.2", "2023-01-05") is None, "the image's Python predates the commit"
    assert older_than("javascript", "v18.19.0", "2021-06-01") == "<18.0.0"
    assert older_than("go", "1.19.8", "2019-01-01") is None, "only the interpreters with release lines here"


def test_a_commit_whose_test_changes_check_nothing_is_no_task(tmp_path: Path) -> None:
    """Tests re-wrapped, imports moved, comments changed, an empty `__init__.py`: they pass before the
    change as after it, so they make no task; a new assertion does. A task names where it came from."""
    from harness.history.mine import MineOptions, mine
    from harness.history.reader import History
    from harness.history.writer import HistoryWriter

    writer = HistoryWriter(tmp_path / "repo")
    writer.commit(
        "start",
        {
            "pkg/__init__.py": "",
            "pkg/mod.py": "def f():\n    return 1\n",
            "tests/test_mod.py": "import os\nfrom pkg.mod import f\n\n\ndef test_f():\n    assert f() == 1\n",
        },
    )
    writer.commit(
        "Tidy imports",
        {
            "pkg/mod.py": "def f():\n    return 1  # one\n",
            "tests/test_mod.py": "from pkg.mod import f\nimport os\n\n# the test\ndef test_f():\n"
            "    assert f()  ==  1\n",
            "tests/__init__.py": "",
        },
    )
    fix = writer.commit(
        "Make f two",
        {
            "pkg/mod.py": "def f():\n    return 2\n",
            "tests/test_mod.py": "from pkg.mod import f\n\n\ndef test_f():\n    assert f() == 2\n",
        },
    )
    writer.close()  # fmt: skip
    with History.open(tmp_path / "repo") as history:
        mined = mine(history, MineOptions())
    assert [task.subject for task in mined.tasks] == ["Make f two"]
    assert [s.reason for s in mined.skipped if s.subject == "Tidy imports"] == [
        "its test changes check nothing new (only comments, imports, blank lines or formatting)"
    ]
    [task] = mined.tasks
    assert task.commit == fix.decode() and task.parent and task.date.count("-") == 2


def test_what_the_reference_adds_to_the_manifests_is_installed_too(tmp_path: Path) -> None:
    """A change that starts using a package: its tests need it after the change, so setup installs
    it (the start state's manifest does not name it yet)."""
    from harness.history.mine import MineOptions, mine
    from harness.history.reader import History
    from harness.history.writer import HistoryWriter

    writer = HistoryWriter(tmp_path / "repo")
    writer.commit("start", {"package.json": '{"devDependencies": {"ava": "^5"}}', "index.js": "module.exports = 1\n",
                            "test.js": "require('assert').equal(require('.'), 1)\n"})  # fmt: skip
    writer.commit("Use a transliterator", {
        "package.json": '{"dependencies": {"translit": "^1.2.0"}, "devDependencies": {"ava": "^5"}}',
        "index.js": "module.exports = require('translit')('a')\n",
        "test.js": "require('assert').equal(require('.'), 'a')\n",
    })  # fmt: skip
    writer.close()
    with History.open(tmp_path / "repo") as history:
        [task] = mine(history, MineOptions()).tasks
    assert task.added == ["translit@^1.2.0"]
    start = _tree(tmp_path / "start", {"package.json": '{"devDependencies": {"ava": "^5"}}'})
    keys = setup_keys(start, "javascript", SetupPolicy(), task.added)
    assert keys["setup"] == ["npm install", "npm install --no-save 'translit@^1.2.0'"]


def test_a_start_state_with_a_devcontainer_takes_it_for_auto_and_devcontainer(tmp_path: Path) -> None:
    plain = _tree(tmp_path / "plain", {"requirements.txt": "attrs\n"})
    declaring = _tree(tmp_path / "dc", {"requirements.txt": "attrs\n", ".devcontainer/devcontainer.json": "{}"})
    for words in (["auto"], ["devcontainer"]):
        keys = setup_keys(declaring, "python", SetupPolicy(commands=words), ["six"])
        assert keys["setup"] == ["devcontainer", "python3 -m pip install six"], "what the reference adds, after"
        assert keys["allow_net"] == ["pypi"]
        assert setup_keys(plain, "python", SetupPolicy(commands=words))["setup"][0].endswith(
            "-r /tmp/harness-requirements.txt"
        )
    mixed = setup_keys(declaring, "python", SetupPolicy(commands=["echo first", "auto"]))
    assert mixed["setup"] == ["echo first", "devcontainer"]
    assert setup_keys(declaring, "python", SetupPolicy(commands=["none"])) == {}
