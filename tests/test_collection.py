"""The suite's own collection: a module `-m` deselects entirely is not imported, and nothing else changes."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import MODULE_MARKS, module_marks, never_selected

FAST = "not docker and not slow"


def test_marks_are_read_from_the_pytestmark_line():
    assert module_marks("[pytest.mark.docker, pytest.mark.timeout(300)]") == {"docker", "timeout"}
    assert module_marks("pytest.mark.timeout(60)") == {"timeout"}
    assert module_marks("[pytest.mark.docker,\n    pytest.mark.slow]") == {"docker", "slow"}
    assert module_marks("[mark.docker]") == set()  # not pytest.mark: not judged
    assert module_marks("[pytest.mark.docker") == set()  # unreadable: collected as usual


def test_only_a_module_no_test_of_which_can_be_selected_is_left_out():
    assert never_selected(FAST, {"docker", "timeout"})
    assert never_selected(FAST, {"slow"})
    assert not never_selected(FAST, {"timeout"})  # its tests may or may not be docker: collected
    assert not never_selected(FAST, set())
    assert never_selected("docker", {"timeout"}) is False  # a test of it may carry docker itself
    assert not never_selected("not docker or slow", {"docker"})  # a test of it may carry slow
    assert never_selected("not (docker or local_model)", {"local_model"})
    assert not never_selected("docker and not slow", {"docker"})
    assert not never_selected("timeout(60)", {"docker"})  # marks with arguments: never judged
    assert not never_selected("not docker and", {"docker"})  # not an expression pytest takes either


def test_every_module_that_declares_marks_says_them_in_a_form_the_hook_reads():
    root = Path(__file__).resolve().parent
    for path in root.rglob("test_*.py"):
        found = MODULE_MARKS.search(path.read_text(encoding="utf-8"))
        if found:
            assert module_marks(found.group(1)), f"{path}: pytestmark not read: {found.group(1)!r}"
