"""`reference:FILE`: a model that makes a mined task's reference change through the normal tools, so
a batch of mined tasks runs end to end offline and its report must say 100%.

It reads every file the reference changes that exists (read_file), writes each changed or new file
whole (write_file with overwrite), removes the deleted ones (run_command), runs the tests, and says
it is done. `harness batch --model reference:` gives each task its own `reference` file.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.errors import ConfigError
from harness.providers.config import ProviderConfig
from harness.providers.factory import register_provider
from harness.providers.scripted import mechanical_summary
from harness.types import Message, ModelTurn, ToolCall, ToolSchema, is_summary_request, turns_so_far

DONE = (
    "I applied the reference change of this task. It is the change the original commit made. "
    "The tests ran after it.\nBiggest obstacle: none"
)


class ReferenceProvider:
    """Answers with the turns that make one reference change."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            files: dict[str, Any] = data["files"]
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise ConfigError(f"reference:{path}: not a readable reference file ({type(error).__name__})") from None
        self.name = f"reference:{self.path}"
        self.model = "reference"
        self.turns = _turns(files)

    def __repr__(self) -> str:
        return f"ReferenceProvider({self.path})"

    def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSchema],
        *,
        max_tokens: int,
        timeout_s: float | None = None,
    ) -> ModelTurn:
        if is_summary_request(messages):
            return ModelTurn(text=mechanical_summary(messages), stop_reason="end_turn", model=self.model)
        index = turns_so_far(messages)
        if index < len(self.turns):
            return self.turns[index]
        return ModelTurn(text=DONE, stop_reason="end_turn", model=self.model)


def _turns(files: dict[str, Any]) -> list[ModelTurn]:
    changed = {path: spec for path, spec in files.items() if spec is not None}
    deleted = sorted(path for path, spec in files.items() if spec is None)
    existing = sorted(path for path, spec in changed.items() if not spec.get("new")) + deleted
    turns = []
    if existing:
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
    turns.append(
        ModelTurn(text="Running the tests.", tool_calls=[_call("tests", "run_tests", {})], stop_reason="tool_use")
    )
    return turns


def _call(call_id: str, name: str, arguments: dict[str, Any]) -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments=arguments)


def _factory(target: str, config: ProviderConfig, api_key: str | None) -> ReferenceProvider:
    return ReferenceProvider(Path(target).expanduser())


register_provider("reference", _factory)
