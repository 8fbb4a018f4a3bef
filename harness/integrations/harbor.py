"""harness as a Harbor environment: `harbor run -p TASK -a AGENT -e harness.integrations.harbor:HarnessEnvironment`.

Every trial gets harness's isolation. The task's `environment/Dockerfile` is built by harness without
pulls (a FROM the engine lacks is an error naming it; `harness images import FILE.tar` brings one in),
with a layer that gives the sandbox user the task's working directory and the folders Harbor writes
(/logs, /tests, /solution). The working directory's files become a harness session's workspace;
every exec runs in a fresh hardened container of that session (no capabilities, no-new-privileges,
the sandbox user, CPU, memory and process limits from the task, no network unless the task lists
hosts), and what it changed outside the workspace is kept as the session's next step image. Every
exec is a step: `harness show`, `diff`, `rollback` and `view` work on the trial's session.

What does not map is refused before anything starts: GPUs and TPUs (Harbor checks the capabilities
declared here), compose-based tasks (a docker-compose file in the environment), Windows tasks.
Network: `none` stays none; an allowlist becomes the session's egress allowlist (HTTP(S) through the
session's proxy, every request recorded); `public` is run with no network (harness gives no open
network) and says so in the log. Harbor's `user` (root) is not honoured: every exec runs as the
sandbox user.

Harbor needs Python 3.12+; this module is imported only where Harbor is installed (`harness[harbor]`).
"""

from __future__ import annotations

import asyncio
import base64
import io
import os
import shlex
import tarfile
import tempfile
import uuid
from pathlib import Path, PurePosixPath
from typing import Any

try:
    from harbor.environments.base import BaseEnvironment, ExecResult
    from harbor.environments.capabilities import EnvironmentCapabilities, EnvironmentResourceCapabilities
    from harbor.environments.options import EnvironmentOptions
except ImportError as missing:  # pragma: no cover - the message is the point
    raise ImportError(
        "harness.integrations.harbor runs inside Harbor, which needs Python 3.12 or newer: "
        "pip install 'harness[harbor]' in a 3.12+ environment"
    ) from missing

from harness.assembly import engine
from harness.integrations.box import Box, BoxConfig

TRANSFER_CAP = 512 * 1024**2
"""Bytes one download may bring back (base64 of a tar)."""


class HarnessEnvironmentOptions(EnvironmentOptions):
    """`--ek KEY=VALUE` options of the harness environment."""

    state_dir: str | None = None
    """Where each trial's session goes (default: harness's per-user sessions directory)."""
    runtime: str = "runc"
    """OCI runtime of every exec: runc or runsc (gVisor)."""
    keep_session: bool = True
    """Keep the trial's session (and its step images) for `harness show`/`diff`/`view`."""
    docker_host: str | None = None
    run_id: str | None = None
    """The harness.run label of the trial's containers (default: its session id)."""


class HarnessEnvironment(BaseEnvironment):
    """One Harbor trial environment on one harness session."""

    options_model = HarnessEnvironmentOptions
    options: HarnessEnvironmentOptions

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._box: Box | None = None
        self._tag = f"harness/harbor-task:{_slug(self.session_id)}-{uuid.uuid4().hex[:8]}"
        self._workdir = "/workspace"
        self._said_user = False

    @staticmethod
    def type() -> Any:
        return "harness"

    @classmethod
    def resource_capabilities(cls) -> EnvironmentResourceCapabilities:
        return EnvironmentResourceCapabilities(cpu_limit=True, memory_limit=True, fractional_cpus=True)

    @property
    def capabilities(self) -> EnvironmentCapabilities:
        return EnvironmentCapabilities(
            disable_internet=True,
            network_allowlist=True,
            network_allowlist_hostnames=True,
            network_allowlist_wildcard_hostnames=True,
            network_allowlist_ipv4_addresses=True,
            network_allowlist_ipv4_cidrs=True,
        )

    def _validate_definition(self) -> None:
        folder = Path(self.environment_dir)
        composed = [p.name for p in folder.glob("docker-compose*.y*ml")] + [p.name for p in folder.glob("compose.y*ml")]
        if composed:
            raise ValueError(
                f"the harness environment runs one container per exec and no compose services: "
                f"{composed[0]} in {folder} cannot map (run this task with another environment)"
            )
        if not (folder / "Dockerfile").is_file():
            raise ValueError(f"the harness environment builds the task's Dockerfile: there is none in {folder}")

    # --- lifecycle ------------------------------------------------------------------------------

    async def start(self, force_build: bool) -> None:
        await asyncio.to_thread(self._start)

    def _start(self) -> None:
        options = self.options
        tag, self._workdir = engine.build_task_image(
            options.docker_host,
            Path(self.environment_dir),
            self._tag,
            log=self.logger.debug,
            run_id=options.run_id or "",
        )
        with tempfile.TemporaryDirectory(prefix="harness-harbor-") as seed:
            engine.copy_out_of_image(options.docker_host, tag, self._workdir, Path(seed), options.run_id or "harbor")
            config = BoxConfig(
                image=tag,
                repo=Path(seed),
                workdir=self._workdir,
                runtime=options.runtime,
                cpus=float(self._effective_cpus or 1),
                memory=(self._effective_memory_mb or 2048) * 1024**2,
                timeout_s=3600,
                state_dir=Path(options.state_dir) if options.state_dir else None,
                keep_session=options.keep_session,
                docker_host=options.docker_host,
                run_id=options.run_id,
                session=self._network_settings(),
            )
            self._box = Box(config, name=f"harbor-{self.session_id}")
        self.logger.info(f"harness session {self._box.id} (workspace {self._workdir}, image {tag})")

    def _network_settings(self) -> dict[str, Any]:
        policy = self.network_policy
        mode = str(getattr(policy.network_mode, "value", policy.network_mode))
        if mode == "allowlist" and policy.allowed_hosts:  # Harbor names hosts: every port of each
            hosts = [f"[{host}]:*" if ":" in host else f"{host}:*" for host in policy.allowed_hosts]
            return {"allow_net": hosts, "allow_net_tools": True}
        if mode == "public":
            self.logger.warning("the task asks for public network: harness runs it with none (list allowed hosts)")
        return {}

    async def stop(self, delete: bool) -> None:
        await asyncio.to_thread(self._stop, delete)

    def _stop(self, delete: bool) -> None:
        try:
            if self._box is not None:
                self._box.close()
        finally:
            if delete:
                engine.remove_task_image(self.options.docker_host, self._tag)

    @property
    def harness_session(self) -> str | None:
        """The trial's harness session id (for `harness show`)."""
        return self._box.id if self._box is not None else None

    # --- calls ----------------------------------------------------------------------------------

    def _running(self) -> Box:
        if self._box is None:
            raise RuntimeError("the harness environment is not started")
        return self._box

    async def exec(
        self,
        command: str,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout_sec: int | None = None,
        user: str | int | None = None,
    ) -> ExecResult:
        if user not in (None, "", self.default_user) and not self._said_user:
            self._said_user = True
            self.logger.info(f"exec as {user!r} runs as the sandbox user (harness never runs as root)")
        merged = self._merge_env(env) or {}
        workdir = cwd or self.task_env_config.workdir or self._workdir
        box = self._running()

        def run() -> ExecResult:
            envelope = box.exec(
                ["bash", "-c", command], cwd=workdir, env=merged, timeout_s=float(timeout_sec) if timeout_sec else None
            )
            stderr = envelope.stderr
            if envelope.status == "timeout":
                stderr += f"\n[harness: killed after the {timeout_sec}s limit]"
            return ExecResult(stdout=envelope.stdout, stderr=stderr, return_code=envelope.exit_code)

        return await asyncio.to_thread(run)

    async def upload_file(self, source_path: Path | str, target_path: str) -> None:
        target = PurePosixPath(target_path)
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as archive:
            archive.add(str(source_path), arcname=target.name)
        await self._untar(buffer.getvalue(), str(target.parent))

    async def upload_dir(self, source_dir: Path | str, target_dir: str) -> None:
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as archive:
            for child in sorted(Path(source_dir).iterdir()):
                archive.add(str(child), arcname=child.name)
        await self._untar(buffer.getvalue(), target_dir)

    async def _untar(self, data: bytes, target_dir: str) -> None:
        box = self._running()
        script = 'mkdir -p -- "$1" && tar -x --no-same-owner -f - -C "$1"'

        def run() -> None:
            envelope = box.exec(
                ["sh", "-c", script, "harness-upload", target_dir], stdin=data, note=f"upload {target_dir}"
            )
            if envelope.exit_code != 0:
                raise RuntimeError(
                    f"upload to {target_dir} failed (exit {envelope.exit_code}): {envelope.stderr.strip()}"
                )

        await asyncio.to_thread(run)

    async def download_file(self, source_path: str, target_path: Path | str) -> None:
        source = PurePosixPath(source_path)
        target = Path(target_path)
        with tempfile.TemporaryDirectory(prefix="harness-harbor-") as scratch:
            await self._tar_out(str(source.parent), source.name, Path(scratch))
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(Path(scratch) / source.name, target)

    async def download_dir(self, source_dir: str, target_dir: Path | str) -> None:
        await self._tar_out(source_dir, ".", Path(target_dir))

    async def _tar_out(self, folder: str, member: str, target: Path) -> None:
        box = self._running()
        script = 'cd -- "$1" && tar -c -f - -- "$2" | base64 -w 0'

        def run() -> None:
            envelope = box.exec(
                ["sh", "-c", script, "harness-download", folder, member], output_cap=TRANSFER_CAP, note=None
            )
            if envelope.exit_code != 0 or not envelope.stdout:
                raise RuntimeError(
                    f"download of {shlex.quote(folder)}/{member} failed (exit {envelope.exit_code}): "
                    f"{envelope.stderr.strip()}"
                )
            target.mkdir(parents=True, exist_ok=True)
            with tarfile.open(fileobj=io.BytesIO(base64.b64decode(envelope.stdout))) as archive:
                archive.extractall(target, filter="data")

        await asyncio.to_thread(run)


def _slug(text: str) -> str:
    cleaned = "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in text.lower()).strip("-_.")
    return cleaned[:60] or "trial"
