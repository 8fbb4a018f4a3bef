"""The shape of the code stays checkable: every harness module is under the "only the CLI is on top"
contract, every error class carries an exit code of the one table, and no import cycle forms between
modules."""

from __future__ import annotations

import tomllib
from pathlib import Path

import grimp

from harness.errors import ExitCode, HarnessError
from sandbox import errors as sandbox_errors

ROOT = Path(__file__).resolve().parents[1]


def _contract(name: str) -> dict:
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    return next(c for c in contracts if c["name"] == name)


def test_every_module_below_the_cli_is_forbidden_to_import_it() -> None:
    listed = set(_contract("only the CLI is on top: nothing below it imports it")["source_modules"])
    modules = {f"harness.{p.stem}" for p in (ROOT / "harness").glob("*.py") if p.stem != "__init__"}
    packages = {f"harness.{p.parent.name}" for p in (ROOT / "harness").glob("*/__init__.py")}
    assert (modules | packages) - {"harness.cli"} == listed


def test_every_error_carries_an_exit_code_of_the_table() -> None:
    classes = [c for c in vars(sandbox_errors).values() if isinstance(c, type) and issubclass(c, Exception)]
    classes += [HarnessError, *HarnessError.__subclasses__()]
    codes = {c.__name__: c.exit_code for c in classes if hasattr(c, "exit_code")}
    assert len(codes) >= 12
    assert {name: code for name, code in codes.items() if code not in set(ExitCode)} == {}


def test_no_import_cycles_between_modules() -> None:
    """Not even through a function-level or TYPE_CHECKING import: each would be one refactor from real."""
    graph = grimp.build_graph("harness", "sandbox", include_external_packages=False)
    cycles = sorted(
        (module, imported)
        for module in graph.modules
        for imported in graph.find_modules_directly_imported_by(module)
        if imported != module and graph.chain_exists(imported, module)
    )
    assert cycles == [], f"import cycles: {cycles}"
