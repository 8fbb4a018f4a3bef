"""What verification says when the tests could not import something: the name, the line that said
so, and what would have installed it (the repository's dependency files, the setup that ran or not);
nothing when the output names no missing import."""

from __future__ import annotations

from harness.agent.verify import missing_dependency

PYTEST = """E   ModuleNotFoundError: No module named 'requests'
=========================== short test summary info ============================
ERROR tests/test_dep.py
"""


def test_a_python_import_with_a_requirements_file_and_no_setup(tmp_path):
    (tmp_path / "requirements.txt").write_text("requests\n")
    said = missing_dependency(PYTEST, tmp_path, [])
    assert said.startswith("the tests cannot import 'requests' (ModuleNotFoundError: No module named 'requests')")
    assert "declares its dependencies in requirements.txt: --setup auto installs them" in said


def test_node_and_go_and_a_setup_that_ran(tmp_path):
    node = "Error: Cannot find module 'lodash'\nRequire stack:\n- /workspace/test.js"
    (tmp_path / "package.json").write_text("{}")
    assert "cannot import 'lodash'" in missing_dependency(node, tmp_path, [])
    go = "main_test.go:4:2: no required module provides package github.com/x/y; to add it:"
    said = missing_dependency(go, tmp_path, ["go mod download"])
    assert "cannot import 'github.com/x/y'" in said and "setup (`go mod download`) did not install it" in said


def test_nothing_when_no_import_failed(tmp_path):
    assert missing_dependency("FAILED tests/test_ops.py::test_add - assert -1 == 5", tmp_path, []) == ""
    assert "--setup 'COMMAND'" in missing_dependency(PYTEST, tmp_path, [])
