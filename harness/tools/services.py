"""`service_logs`: what a session's services wrote (stdout and stderr, the last lines), for the model
to see why a database refused a connection or a dev server crashed. In the menu only when the run
has services."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, create_model

from harness.policy.gate import GateRequest
from harness.tools.registry import ToolContext
from harness.tools.schema import Outcome, Tool

NAME = "service_logs"


def service_logs_tool(names: Sequence[str], read: Callable[[str, int], str]) -> Tool:
    """The tool over the running services `names`; read(name, lines) gives a service's log."""
    model = create_model(
        "service_logs_args",
        __config__=ConfigDict(extra="forbid"),
        name=(Literal[tuple(names)], Field(description="The service, as the task names it.")),  # type: ignore[arg-type]
        lines=(int, Field(200, ge=1, le=5000, description="How many of its last lines (1-5000; default 200).")),
    )

    def run(ctx: ToolContext, name: str, lines: int) -> Outcome:
        text = read(name, lines).rstrip()
        return Outcome(f"OK service_logs {name}: last {lines} line(s)\n{text or '(it wrote nothing)'}")

    def request(args: BaseModel) -> GateRequest:
        return GateRequest(tool=NAME, tier="read", paths=())

    description = (
        f"Read the last lines a service of this session wrote (stdout and stderr): {', '.join(names)}.\n"
        "Parameters:\n- name: the service.\n- lines: how many of its last lines (default 200).\n"
        "Use it when: a call to a service fails or answers oddly and you need its side of the story.\n"
        "Do NOT use it when: you want the output of your own command (it is in that call's result)."
    )
    return Tool(NAME, run, model, "read", description, request)
