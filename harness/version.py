"""harness's own version, as installed (the package metadata), for `--version`, spans and ATIF."""

from __future__ import annotations


def harness_version() -> str:
    """The installed distribution's version; "0" when harness runs from a tree never installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("harness")
    except PackageNotFoundError:
        return "0"
