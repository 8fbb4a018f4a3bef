"""`reference:FILE`: a model that makes a mined task's reference change through the normal tools, so
a batch of mined tasks runs end to end offline and its report must say 100%.

It reads every file the reference changes that exists (read_file), writes each changed or new file
whole (write_file with overwrite), removes the deleted ones (run_command), runs the tests, and says
it is done. `harness batch --model reference:` gives each task its own `reference` file.

`reference-change:FILE` makes the change alone (no reads, no test run) and says it is done: what
`harness tasks check` runs, whose verdict is the verify's after the change (the reads and the test
run a careful model makes would only start containers and run the tests once more before it).
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

from harness.errors import ConfigError
from harness.providers.config import ProviderConfig
from harness.providers.factory import register_provider
from harness.providers.scripted import ScriptedProvider
from harness.types import ModelTurn, ToolCall

DONE = (
    "I applied the reference change of this task. It is the change the original commit made. "
    "The tests ran after it.\nBiggest obstacle: none"
)


def reference_provider(path: Path, *, change_only: bool = False) -> ScriptedProvider:
    """A canned model that makes the reference change in `path` (a mined task's reference.json), then
    says it is done: the scripted model's machinery with turns computed from the reference (with
    change_only, the writes and removals alone)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        files: dict[str, Any] = data["files"]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ConfigError(f"reference:{path}: not a readable reference file ({type(error).__name__})") from None
    turns = [*_turns(files, change_only), ModelTurn(text=DONE, stop_reason="end_turn", model="reference")]
    return ScriptedProvider(turns, name=f"{'reference-change' if change_only else 'reference'}:{path}")


def _turns(files: dict[str, Any], change_only: bool) -> list[ModelTurn]:
    changed = {path: spec for path, spec in files.items() if spec is not None}
    deleted = sorted(path for path, spec in files.items() if spec is None)
    existing = sorted(path for path, spec in changed.items() if not spec.get("new")) + deleted
    turns = []
    if existing and not change_only:
        reads = [_call(f"read-{n}", "read_file", {"path": path}) for n, path in enumerate(existing)]
        turns.append(ModelTurn(text="Reading the files the change touches.", tool_calls=reads, stop_reason="tool_use"))
    writes = [
        _call(f"write-{n}", "write_file", {"path": path, "content": spec["content"], "overwrite": True})
        for n, (path, spec) in enumerate(sorted(changed.items()))
    ]
    if deleted:
        command = "rm -f -- " + " ".join(shlex.quote(path) for path in deleted)
        writes.append(_call("delete", "run_command", {"command": command}))
    executable = sorted(path for path, spec in changed.items() if spec.get("executable"))
    if executable:
        writes.append(
            _call("chmod", "run_command", {"command": "chmod +x -- " + " ".join(shlex.quote(p) for p in executable)})
        )
    if writes:
        turns.append(ModelTurn(text="Making the change.", tool_calls=writes, stop_reason="tool_use"))
    if change_only:
        return turns
    turns.append(
        ModelTurn(text="Running the tests.", tool_calls=[_call("tests", "run_tests", {})], stop_reason="tool_use")
    )
    return turns


def _call(call_id: str, name: str, arguments: dict[str, Any]) -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments=arguments)


def _factory(target: str, config: ProviderConfig, api_key: str | None) -> ScriptedProvider:
    return reference_provider(Path(target).expanduser())


def _change_factory(target: str, config: ProviderConfig, api_key: str | None) -> ScriptedProvider:
    return reference_provider(Path(target).expanduser(), change_only=True)


register_provider("reference", _factory)
register_provider("reference-change", _change_factory)
