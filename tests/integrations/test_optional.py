"""The extras stay optional: harness imports and runs without Inspect AI or mini-swe-agent loaded."""

from __future__ import annotations

import subprocess
import sys


def test_the_cli_and_the_api_load_neither_framework() -> None:
    probe = (
        "import sys, harness, harness.api, harness.assembly, harness.cli.app, harness.integrations.box\n"
        "loaded = sorted(m for m in ('inspect_ai', 'minisweagent', 'litellm') if m in sys.modules)\n"
        "print(','.join(loaded))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ""


def test_the_inspect_entry_point_names_the_provider_module() -> None:
    from importlib.metadata import entry_points

    (point,) = [ep for ep in entry_points(group="inspect_ai") if ep.name == "harness"]
    assert point.value == "harness.integrations.inspect_sandbox"
