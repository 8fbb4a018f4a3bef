"""The shape of the code stays checkable: every harness package and module has its floor in the layers
contract, every folder says what it owns, every error class carries an exit code of the one table,
and no import cycle forms between modules."""

from __future__ import annotations

import tomllib
from pathlib import Path

import grimp

from harness.errors import ExitCode, HarnessError
from sandbox import errors as sandbox_errors

ROOT = Path(__file__).resolve().parents[1]


def _contracts() -> list[dict]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]


def test_the_layers_contract_places_every_package_and_module_of_harness() -> None:
    """A new module or package must take its floor: one left out of the layers could import anything."""
    contract = next(c for c in _contracts() if c["name"].startswith("harness layers"))
    listed = {name.strip() for layer in contract["layers"] for name in layer.split("|")}
    modules = {f"harness.{p.stem}" for p in (ROOT / "harness").glob("*.py") if p.stem != "__init__"}
    packages = {f"harness.{p.parent.name}" for p in (ROOT / "harness").glob("*/__init__.py")}
    assert modules | packages == listed
    assert contract["layers"][0] == "harness.cli", "only the CLI is on top"


def test_every_folder_says_what_it_owns() -> None:
    """The folder tree is the architecture diagram: each package's docstring names what it owns."""
    import ast

    for init in [*(ROOT / "harness").glob("*/__init__.py"), *(ROOT / "sandbox").glob("**/__init__.py")]:
        docstring = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8")))
        assert docstring and len(docstring) > 60, f"{init.relative_to(ROOT)} says nothing of what it owns"


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
