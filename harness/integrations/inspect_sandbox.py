"""The `harness` sandbox for Inspect AI: `sandbox="harness"` or `sandbox=("harness", "harness.toml")`.

Registered through Inspect's `inspect_ai` entry point (installed with `pip install 'harness[inspect]'`).
Each sample gets one harness session (see `harness.integrations.box`): every `exec` runs in a fresh
hardened container with no network, killed from the host at its timeout; `read_file` and
`write_file` run inside a container as the sandbox user; each call that changed something is a
step of the session, so `harness show`, `harness diff` and `harness rollback` work on a sample
afterwards. The session folder is named in the sample's log (`harness session list` shows it).

By default the root filesystem is writable and what a call leaves outside the workspace is
committed into the session's step image, because Inspect tasks expect a machine whose files
persist (a script written to /tmp, a cache under HOME); `writable_root = false` in the config
keeps the stricter posture, where only the workspace (the working directory) persists.

Commands never run as root (`user="root"`, or any other user, raises SandboxUserUnsupportedError).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, overload

import anyio
from inspect_ai.util import (
    ExecResult,
    OutputLimitExceededError,
    SandboxEnvironment,
    SandboxEnvironmentConfigType,
    SandboxEnvironmentLimits,
    SandboxUserUnsupportedError,
    sandboxenv,
)
from pydantic import BaseModel

from harness.integrations.box import Box, BoxConfig, FileTooLarge, load_config

VIA_LABEL = {"harness.via": "inspect"}
"""Carried by every container a harness sandbox makes for Inspect (`inspect sandbox cleanup harness`)."""


@sandboxenv(name="harness")
class HarnessSandboxEnvironment(SandboxEnvironment):
    """One harness session per sample."""

    def __init__(self, box: Box) -> None:
        super().__init__()
        self.box = box

    # --- lifecycle ----------------------------------------------------------------------------------

    @classmethod
    def config_files(cls) -> list[str]:
        return ["harness.toml"]

    @classmethod
    def config_deserialize(cls, config: dict[str, Any]) -> BaseModel:
        return load_config(config)

    @classmethod
    async def sample_init(
        cls, task_name: str, config: SandboxEnvironmentConfigType | None, metadata: dict[str, str]
    ) -> dict[str, SandboxEnvironment]:
        chosen = load_config(config if isinstance(config, str | BoxConfig) else None)
        box = await anyio.to_thread.run_sync(lambda: Box(chosen, name=f"inspect-{task_name}", labels=VIA_LABEL))
        return {"default": cls(box)}

    @classmethod
    async def sample_cleanup(
        cls,
        task_name: str,
        config: SandboxEnvironmentConfigType | None,
        environments: dict[str, SandboxEnvironment],
        interrupted: bool,
    ) -> None:
        for environment in environments.values():
            if isinstance(environment, HarnessSandboxEnvironment):
                await anyio.to_thread.run_sync(environment.box.close)

    @classmethod
    async def cli_cleanup(cls, id: str | None) -> None:
        """Remove containers of harness sandboxes whose Inspect process is gone (a live eval's are kept)."""
        from harness.assembly import engine

        extra = dict(VIA_LABEL) if id is None else {**VIA_LABEL, "harness.session": id}
        await anyio.to_thread.run_sync(lambda: engine.prune_containers(None, extra=extra))

    # --- calls --------------------------------------------------------------------------------------

    async def exec(
        self,
        cmd: list[str],
        input: str | bytes | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        user: str | None = None,
        timeout: int | None = None,
        timeout_retry: bool = True,
        concurrency: bool = True,
    ) -> ExecResult[str]:
        if user is not None:
            raise SandboxUserUnsupportedError(
                f"the harness sandbox runs every command as its unprivileged sandbox user, never as {user!r}"
            )
        stdin = input.encode("utf-8") if isinstance(input, str) else input
        cap = SandboxEnvironmentLimits.MAX_EXEC_OUTPUT_SIZE
        envelope = await anyio.to_thread.run_sync(
            lambda: self.box.exec(cmd, stdin=stdin, cwd=cwd, env=env, timeout_s=timeout, output_cap=cap)
        )
        if envelope.status == "timeout":
            raise TimeoutError(f"command timed out after {timeout or self.box.config.timeout_s:g} s: {cmd[0]}")
        if envelope.exit_code == 126 and "Permission denied" in envelope.stderr:
            raise PermissionError(envelope.stderr.strip())
        if envelope.stdout_dropped or envelope.stderr_dropped:
            raise OutputLimitExceededError(
                limit_str=SandboxEnvironmentLimits.MAX_EXEC_OUTPUT_SIZE_STR, truncated_output=envelope.stdout
            )
        stderr = envelope.stderr
        if envelope.status == "oom_killed":
            stderr += f"\n[harness: killed at the memory limit of {self.box.config.memory} bytes]\n"
        return ExecResult(
            success=envelope.exit_code == 0, returncode=envelope.exit_code, stdout=envelope.stdout, stderr=stderr
        )

    async def write_file(self, file: str, contents: str | bytes) -> None:
        data = contents.encode("utf-8") if isinstance(contents, str) else contents
        await anyio.to_thread.run_sync(lambda: self.box.write_file(file, data))

    @overload
    async def read_file(self, file: str, text: Literal[True] = True) -> str: ...

    @overload
    async def read_file(self, file: str, text: Literal[False]) -> bytes: ...

    async def read_file(self, file: str, text: bool = True) -> str | bytes:
        limit = SandboxEnvironmentLimits.MAX_READ_FILE_SIZE  # a context variable: read it on this side
        try:
            data = await anyio.to_thread.run_sync(lambda: self.box.read_file(file, limit=limit))
        except FileTooLarge:
            raise OutputLimitExceededError(
                limit_str=SandboxEnvironmentLimits.MAX_READ_FILE_SIZE_STR, truncated_output=None
            ) from None
        if not text:
            return data
        return data.decode("utf-8")  # newline="" semantics: CRLF stays as it is

    def session_dir(self) -> Path:
        """The sample's harness session folder."""
        return self.box.session.dir
