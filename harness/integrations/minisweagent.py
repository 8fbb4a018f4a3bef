"""A mini-swe-agent environment on harness: swap `DockerEnvironment` for it in a config.

```yaml
environment:
  environment_class: harness.integrations.minisweagent.HarnessEnvironment
  repo: ./my-repo          # copied into the session's workspace (the working directory)
  image: py311
```

Each action runs in a fresh hardened container of one harness session (no network, capabilities
dropped, CPU, memory, process and time limits; mini-swe-agent's `DockerEnvironment` has the bridge
network, a writable root and no limits), and each action that changed something is a step of the
session: `harness session show ID`, `harness diff ID`, `harness rollback ID STEP`. As with
`DockerEnvironment`, files persist between actions (the root is writable, committed per step);
`writable_root: false` keeps only the workspace.

Host environment variables never reach a container: `forward_env` is refused; set what a command
needs in `env`.
"""

from __future__ import annotations

import contextlib
import platform
from pathlib import Path
from typing import Any

from pydantic import Field, model_validator

from harness.integrations.box import Box, BoxConfig

VIA_LABEL = {"harness.via": "mini-swe-agent"}
SUBMIT_MARKER = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
"""mini-swe-agent's convention: an action whose output starts with this line submits the rest."""
SHELLS = {"sh", "bash", "dash", "zsh", "ash"}


class HarnessEnvironmentConfig(BoxConfig):
    """`DockerEnvironmentConfig`'s keys where they make sense here, plus the harness box's."""

    cwd: str = "/workspace"
    """Working directory of every action (the workspace, where `repo` is copied)."""
    env: dict[str, str] = Field(default_factory=dict)
    """Variables set for every action, on top of the sandbox's fixed environment."""
    forward_env: list[str] = Field(default_factory=list)
    """Refused when not empty: host environment variables never pass into a container."""
    timeout: int = Field(30, gt=0)
    """Wall-clock limit of one action in seconds (the container is killed from the host)."""
    interpreter: list[str] = Field(default_factory=lambda: ["bash", "-lc"])
    """Runs each action's command (the command is its last argument)."""

    @model_validator(mode="after")
    def _no_forwarding(self) -> HarnessEnvironmentConfig:
        if self.forward_env:
            raise ValueError(
                "forward_env is not supported: harness never passes host environment variables into a "
                f"container; set the values you mean in `env` instead (asked for: {', '.join(self.forward_env)})"
            )
        return self


class HarnessEnvironment:
    """mini-swe-agent's `Environment` protocol on one harness session."""

    def __init__(self, *, config_class: type = HarnessEnvironmentConfig, logger: Any = None, **kwargs: Any) -> None:
        import logging

        self.logger = logger or logging.getLogger("minisweagent.environment")
        self.config: HarnessEnvironmentConfig = config_class(**kwargs)
        self.box = Box(self.config, name="mini-swe-agent", labels=VIA_LABEL)
        self.logger.info(f"harness session {self.box.id} in {self.box.sessions}")

    @property
    def session_id(self) -> str:
        return self.box.id

    def execute(self, action: dict, cwd: str = "", *, timeout: int | None = None) -> dict[str, Any]:
        """Run the action's command; its output (stderr folded into stdout, as `DockerEnvironment` does)."""
        command = str(action.get("command", ""))
        argv = [*self.config.interpreter, command]
        merged = Path(self.config.interpreter[0]).name in SHELLS
        if merged:  # one stream in the order written, like stderr=STDOUT
            argv[-1] = "exec 2>&1\n" + command
        limit = timeout or self.config.timeout
        envelope = self.box.exec(
            argv, cwd=cwd or self.config.cwd, env=self.config.env, timeout_s=limit, note=f"action: {command}"
        )
        text = envelope.stdout if merged else envelope.stdout + envelope.stderr
        if envelope.status == "timeout":
            output: dict[str, Any] = {
                "output": text,
                "returncode": -1,
                "exception_info": f"An error occurred while executing the command: the command timed out after "
                f"{limit} seconds and its container was killed",
                "extra": {"exception_type": "TimeoutExpired", "exception": f"timed out after {limit} seconds"},
            }
        else:
            output = {"output": text, "returncode": envelope.exit_code, "exception_info": ""}
            if envelope.status == "oom_killed":
                output["exception_info"] = f"The command was killed at the memory limit ({self.config.memory} bytes)."
        self._check_finished(output)
        return output

    def _check_finished(self, output: dict[str, Any]) -> None:
        from minisweagent.exceptions import Submitted

        lines = output.get("output", "").lstrip().splitlines(keepends=True)
        if lines and lines[0].strip() == SUBMIT_MARKER and output["returncode"] == 0:
            submission = "".join(lines[1:])
            raise Submitted(
                {
                    "role": "exit",
                    "content": submission,
                    "extra": {"exit_status": "Submitted", "submission": submission, "harness_session": self.box.id},
                }
            )

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        from minisweagent.utils.serialize import recursive_merge

        return recursive_merge(
            self.config.model_dump(mode="json"), platform.uname()._asdict(), {"harness_session": self.box.id}, kwargs
        )

    def serialize(self) -> dict:
        return {
            "info": {
                "config": {
                    "environment": self.config.model_dump(mode="json"),
                    "environment_type": f"{self.__class__.__module__}.{self.__class__.__name__}",
                    "harness_session": self.box.id,
                    "harness_state_dir": str(self.box.sessions),
                }
            }
        }

    def cleanup(self) -> None:
        """Remove every container of the session (the session folder stays unless keep_session is off)."""
        box = getattr(self, "box", None)
        if box is not None:
            box.close()

    def __del__(self) -> None:  # as DockerEnvironment does; at interpreter exit there may be nothing left to do it with
        with contextlib.suppress(Exception):
            self.cleanup()
