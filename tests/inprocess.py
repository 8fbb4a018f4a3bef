"""A run in this process through the real loop, gate, tools and snapshot store, with commands on the
host FakeSandbox: for tests where the engine adds nothing but time."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness import assembly
from harness.agent.outcome import RunResult, RunState
from harness.assembly import Runtime
from harness.config import RunConfig
from sandbox.fake import FakeSandbox
from sandbox.session.session import Session, SessionConfig


def fake_run(
    repo: Path,
    state_dir: Path,
    provider: Any,
    config: RunConfig,
    *,
    session_id: str | None = None,
    task: str = "fix it",
    on_phase: Callable[[str], None] = lambda phase: None,
    session_config: SessionConfig | None = None,
) -> tuple[RunResult, Path]:
    """Create a session of repo in state_dir and run provider on it to an outcome; (result, folder)."""
    session = Session.create(repo, state_dir, spec=config.spec(), session_id=session_id, config=session_config)
    state = RunState(session_id=session.id, task=task, model=config.model or "", snapshot_step=session.step)
    agent = assembly.build_agent(
        config=config,
        session=session,
        sandbox=FakeSandbox(),
        provider=provider,
        state=state,
        runtime=Runtime(run_id="test", on_phase=on_phase),
    )
    result = agent.run()
    session.close()
    return result, Path(session.dir)
