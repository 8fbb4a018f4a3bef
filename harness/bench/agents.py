"""`harness bench agents`: what harness adds to a hosted agent's shell command, and how long an agent
takes to start once its image is built.

Claude Code, hosted for real (its published packages in its agent image), driven by a loopback model
(harness.bench.wire) that asks for the same command CALLS times, then stops:
- with harness's shell (`--agent-shell harness`, the default): each command is harness's `run_command`
  over MCP, gated, run in a fresh container and recorded with its snapshot;
- with its own shell (`--agent-shell own`): each is its own Bash tool in its own container, gated and
  recorded with its snapshot as well.
Each call's time is the gap between the model requests before and after it (the command, the agent's
own handling of it, harness's record): the median of each side, their ratio (target <= 1.2) on `true`
and on `python3 -c 'print(1)'`, the sides interleaved round by round. Start-up is each run's
`agent_started` record: the agent's container, ACP `initialize` and `session/new`.
"""

from __future__ import annotations

import statistics
import subprocess
import tempfile
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from harness.bench.measure import CLI, cli_env
from harness.bench.wire import MessagesServer
from harness.errors import HarnessError
from harness.trajectory import EventRecord, ToolRecord, TurnRecord, read_records

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "calc"
COMMANDS = {"true": "true", "python": "python3 -c 'print(1)'"}
TARGET = 1.2
SHELLS: tuple[Literal["harness", "own"], ...] = ("harness", "own")
KEY = "sk-ant-bench-placeholder"
"""The gateway sends this to the loopback model (a key is required; no real one is needed)."""


class CommandSide(BaseModel):
    harness_ms: float
    """Median time of one call through harness's run_command (a fresh container)."""
    own_ms: float
    """Median time of one call through the agent's own shell (its own container)."""
    ratio: float
    """harness_ms / own_ms (target <= 1.2)."""
    harness_share_ms: float
    """Of harness_ms, the median time inside harness: from the loop taking the call (its turn record)
    to the call's record written (gate, the fresh container, the record); the rest is the agent's own
    handling of an MCP call and the model's answer."""
    own_share_ms: float
    """Of own_ms, the same for the agent's own shell call (gate asked, the reported call recorded)."""
    bound: float
    """(harness_ms - harness_share_ms) / own_ms: the ratio an instant call through the agent's MCP
    client would have, what no work inside harness can go under."""


class AgentsBench(BaseModel):
    agent: str
    calls: int
    rounds: int
    commands: dict[str, CommandSide]
    startup_ms: float
    """Median time from the agent's container starting to its ACP session answered."""
    startup_max_ms: float
    target: float = TARGET


def _run(
    folder: Path, name: str, shell: Literal["harness", "own"], command: str, calls: int, run_id: str
) -> tuple[list[float], list[float], int]:
    """One hosted run of `calls` calls of command: (each call's ms, harness's share of each, the agent's
    start-up ms)."""
    tool = "mcp__harness__run_command" if shell == "harness" else "Bash"
    config = folder / "bench.toml"  # the same call again and again is the bench, not a loop to stop
    config.write_text("[repetition]\nnote_after = 100000\nstuck_after = 100000\n")
    with MessagesServer([(tool, {"command": command})] * calls) as model:
        argv = [*CLI, "run", "--agent", "claude-code", "--agent-shell", shell, "--model", "anthropic:claude-sonnet-4-6",
                "--base-url", model.url, "--image", "py311", str(EXAMPLE), "--task", "Run the command.", "--no-verify",
                "--max-steps", str(calls + 5), "--session", name, "--state-dir", str(folder), "--config", str(config)]  # fmt: skip
        done = subprocess.run(argv, env=cli_env(HARNESS_RUN_ID=run_id, ANTHROPIC_API_KEY=KEY), capture_output=True,
                              text=True, timeout=900, check=False)  # fmt: skip
        gaps = model.gaps_ms()
    if done.returncode not in (0, 10) or len(gaps) < calls:
        raise HarnessError(
            f"the bench's run ({name}) exited {done.returncode} after {len(gaps)} calls: {done.stderr[-400:]}"
        )
    records = read_records(folder / name)
    started = [r for r in records if isinstance(r, EventRecord) and r.event == "agent_started"]
    shares, taken = [], None
    for record in records:
        if isinstance(record, TurnRecord) and record.turn.tool_calls:
            taken = record.ts
        elif isinstance(record, ToolRecord) and taken is not None:
            shares.append((record.ts - taken) * 1000)
            taken = None
    return gaps, shares, int(started[0].detail.split(" started in ", 1)[1].split(" ms", 1)[0]) if started else 0


def measure(run_id: str, calls: int = 12, rounds: int = 2) -> AgentsBench:
    """Rounds of each command on each side, interleaved; the medians, their ratio, the start-ups."""
    gaps: dict[tuple[str, str], list[float]] = {}
    shares: dict[tuple[str, str], list[float]] = {}
    startups: list[int] = []
    with tempfile.TemporaryDirectory(prefix="harness-bench-agents-") as scratch:
        for n in range(rounds):
            for label, command in COMMANDS.items():
                for shell in SHELLS:
                    found, share, started = _run(Path(scratch), f"{label}-{shell}-{n}", shell, command, calls, run_id)
                    gaps.setdefault((label, shell), []).extend(found[1:])  # the first call warms the agent's path
                    shares.setdefault((label, shell), []).extend(share[1:])
                    startups.append(started)
    sides = {}
    for label in COMMANDS:
        ours, own = statistics.median(gaps[(label, "harness")]), statistics.median(gaps[(label, "own")])
        sides[label] = CommandSide(
            harness_ms=round(ours, 1), own_ms=round(own, 1), ratio=round(ours / own, 2),
            harness_share_ms=round(statistics.median(shares[(label, "harness")]), 1),
            own_share_ms=round(statistics.median(shares[(label, "own")]), 1),
            bound=round((ours - statistics.median(shares[(label, "harness")])) / own, 2),
        )  # fmt: skip
    return AgentsBench(
        agent="claude-code", calls=calls, rounds=rounds, commands=sides,
        startup_ms=round(statistics.median(startups), 1), startup_max_ms=float(max(startups)),
    )  # fmt: skip
