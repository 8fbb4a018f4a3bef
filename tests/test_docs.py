"""The manual stays true: every module is on the architecture page (in its folder's row), every
command is in the README's command table, and every page of docs/ is linked from the front door."""

from __future__ import annotations

import re
from pathlib import Path

import typer.main

from harness.cli import typer_app

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def table_rows(text: str, header: str) -> list[list[str]]:
    """The rows of the markdown table that starts with header, as lists of cells."""
    block = text[text.index(header) :].split("\n\n", 1)[0]
    return [[cell.strip() for cell in line.strip("|").split(" | ")] for line in block.splitlines()[2:]]


def modules() -> list[Path]:
    found = [*ROOT.glob("harness/**/*.py"), *ROOT.glob("sandbox/**/*.py")]
    return sorted(p.relative_to(ROOT) for p in found if p.name != "__init__.py")


def test_every_module_is_named_in_its_folders_row_of_the_architecture_page() -> None:
    rows = table_rows((ROOT / "docs" / "architecture.md").read_text(encoding="utf-8"), "| folder / module | owns |")
    missing = []
    for module in modules():
        folder, stem = f"{module.parent.as_posix()}/", module.stem
        top_level = module.parent.name in ("harness", "sandbox")
        named = [
            row
            for row in rows
            if (f"`{module.as_posix()}`" in row[0] or f"`{module.name}`" in row[0])
            or (f"`{folder}`" in row[0] and (not top_level or "(top)" in row[0]) and f"`{stem}`" in row[1])
        ]
        if not named:
            missing.append(str(module))
    assert missing == [], f"modules the architecture page does not name: {missing}"


def commands() -> list[str]:
    """Every command path of the CLI, e.g. `session list`, `bench run`, `show`."""
    found: list[str] = []

    def walk(command, prefix: str) -> None:
        subcommands = getattr(command, "commands", None)
        if not subcommands:
            found.append(prefix.strip())
            return
        for name, sub in subcommands.items():
            walk(sub, f"{prefix} {name}")

    walk(typer.main.get_command(typer_app()), "")
    return sorted(found)


def test_every_command_is_in_the_readme_command_table() -> None:
    cells = [row[0] for row in table_rows(README, "| command | what it does |")]
    missing = []
    for path in commands():
        *group, leaf = path.split()
        start = "`harness " + " ".join(group) + (" " if group else "")
        found = any(
            re.search(rf"(?:^|[`/ ])harness {re.escape(' '.join(group))}\b", cell)
            and re.search(rf"(?<![\w-]){re.escape(leaf)}(?![\w-])", cell)
            for cell in cells
            if start.strip("`") in cell
        )
        if not found:
            missing.append(path)
    assert len(commands()) > 30
    assert missing == [], f"commands the README's table does not list: {missing}"


def test_every_docs_page_is_linked_from_the_front_door_and_every_link_resolves() -> None:
    pages = sorted(p.name for p in (ROOT / "docs").glob("*.md"))
    linked = set(re.findall(r"\(docs/([\w.-]+\.md)\)", README))
    assert set(pages) <= linked, f"docs pages the README does not link: {set(pages) - linked}"
    for source in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]:
        for target in re.findall(r"\]\(([\w./-]+\.md)\)", source.read_text(encoding="utf-8")):
            assert (source.parent / target).is_file(), f"{source.name} links to a missing page: {target}"


def test_the_front_door_stays_a_front_door() -> None:
    assert README.startswith("# harness\n")
    assert "make demo " in README.split("\n\n", 2)[1] and "make test " in README.split("\n\n", 2)[1]
    assert len(README.splitlines()) < 250
