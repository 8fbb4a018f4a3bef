"""One harness session as a plain execution backend, for frameworks that bring their own agent loop.

Inspect AI's sandbox API and mini-swe-agent's environments both want "run this command, read this
file, write that one" against something that behaves like a machine. A `Box` is that, on harness:
every command runs in a fresh hardened container of one session (no network, capabilities dropped,
CPU, memory, process and time limits, killed from the host at its deadline), on the session's
workspace and image, and every call that changed something is a step `harness rollback` can undo.

File reads and writes run inside a container too, as the sandbox user: paths and symlinks resolve
in the container's view (never on the host), permissions are the sandbox user's, and nothing is
copied into or out of a live container.

In a writable-root box (the default), what a call leaves anywhere it may write (the workspace,
/tmp, HOME) is there for the next call: outside the workspace it is committed into the session's
step image. With `writable_root = false` the root is read-only and /tmp a fresh tmpfs per call,
so only the workspace persists.
"""

from __future__ import annotations

import contextlib
import errno
import shlex
import tempfile
import threading
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from sandbox.settings import SessionSettings, lift_flat
from sandbox.spec import parse_size

if TYPE_CHECKING:
    from sandbox.envelope import Envelope
    from sandbox.spec import SandboxSpec

CALL_OUTPUT_CAP = 10 * 1024**2
"""Bytes of stdout and stderr kept per call (the frameworks' own default per stream)."""


class BoxConfig(BaseModel):
    """What a box is made of; the same keys in a TOML file (`[harness]` table or top level)."""

    model_config = ConfigDict(extra="forbid")

    image: str = "py311"
    """Sandbox image of every call (`harness images list`)."""
    repo: Path | None = None
    """A directory copied into the workspace at the start (the repository); none: an empty workspace."""
    writable_root: bool = True
    """Files outside the workspace (in /tmp, HOME) persist between calls, committed as step images.
    False: a read-only root and a fresh /tmp per call; only the workspace persists."""
    runtime: Literal["runc", "runsc"] = "runc"
    cpus: float = Field(1.0, gt=0, le=256)
    memory: int = Field(1024**3, ge=16 * 1024**2)
    pids: int = Field(256, ge=8, le=65536)
    timeout_s: float = Field(600.0, gt=0, le=24 * 3600)
    """Wall-clock limit of a call that names none."""
    workdir: str = "/workspace"
    """Where the workspace is mounted in every call's container (and commands start)."""
    session: SessionSettings = Field(default_factory=SessionSettings)
    """Setup commands run once before the first call in a writable-root container (cached by
    content), what they alone may have (network, CA bundle, proxy, read-only mounts), and a workspace
    quota: the sandbox's session settings. The keys may be given flat (`setup = [...]`)."""
    state_dir: Path | None = None
    """Where the session folder goes (default: harness's per-user sessions directory)."""
    keep_session: bool = True
    """Keep the session folder (and its step images) after cleanup, for `harness show/diff/rollback`."""
    docker_host: str | None = None
    """The engine's address (default: the local socket)."""
    run_id: str | None = None
    """The `harness.run` label of every container (default: the session id; `harness sandbox prune --run`)."""

    @model_validator(mode="before")
    @classmethod
    def _flat_session_keys(cls, data: Any) -> Any:
        return lift_flat(data)

    @field_validator("memory", mode="before")
    @classmethod
    def _size(cls, value: int | str) -> int:
        return parse_size(value)

    def spec(self, labels: Mapping[str, str] = {}) -> SandboxSpec:
        from sandbox.spec import SandboxSpec

        return SandboxSpec(
            image=self.image,
            runtime=self.runtime,
            cpus=self.cpus,
            memory=self.memory,
            pids=self.pids,
            timeout_s=self.timeout_s,
            workdir=self.workdir,
            labels=dict(labels),
        )


def load_config(source: str | Path | Mapping[str, object] | BoxConfig | None) -> BoxConfig:
    """A BoxConfig from a TOML file (relative `repo`/`state_dir` resolve against its folder), a
    mapping, or nothing (the defaults). Errors name the file and the key."""
    import tomllib

    from pydantic import ValidationError

    from harness.errors import ConfigError

    if source is None:
        return BoxConfig()
    if isinstance(source, BoxConfig):
        return source
    if isinstance(source, Mapping):
        try:
            return BoxConfig.model_validate(dict(source))
        except ValidationError as error:
            raise ConfigError(f"harness sandbox config: {_first_problem(error)}") from None
    path = Path(source)
    from sandbox.named import NamedFileError, read_named

    try:
        data = tomllib.loads(read_named(path, what="the harness sandbox config", limit=4 * 1024**2).decode("utf-8"))
    except NamedFileError as error:
        raise ConfigError(str(error)) from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise ConfigError(f"{path} is not valid TOML: {error}") from None
    table = data.get("harness", data)
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [harness] must be a table")
    for where, key in (("", "repo"), ("", "state_dir"), ("", "setup_ca"), ("session", "setup_ca")):
        holder = table.get(where, {}) if where else table
        if isinstance(holder, dict) and isinstance(holder.get(key), str):
            holder[key] = str((path.parent / holder[key]).resolve())
    try:
        return BoxConfig.model_validate(table)
    except ValidationError as error:
        raise ConfigError(f"{path}: {_first_problem(error)}") from None


def _first_problem(error: object) -> str:
    problems = error.errors()  # type: ignore[attr-defined]
    first = problems[0]
    where = ".".join(str(part) for part in first["loc"]) or "(top)"
    return f"{where}: {first['msg']}"


class FileTooLarge(OSError):
    """read_file of a file above the caller's limit (nothing was transferred)."""

    def __init__(self, path: str, size: int, limit: int) -> None:
        super().__init__(errno.EFBIG, f"{path} is {size} bytes, over the limit of {limit}")
        self.path, self.size, self.limit = path, size, limit


# Both scripts take the path as $1 (never interpolated) and say what went wrong by exit code.
_READ = r"""
f=$1
if [ -d "$f" ]; then echo "Is a directory: $f" >&2; exit 21; fi
if [ ! -e "$f" ]; then echo "No such file or directory: $f" >&2; exit 2; fi
if [ ! -f "$f" ]; then echo "Not a regular file: $f" >&2; exit 22; fi
if [ ! -r "$f" ]; then echo "Permission denied: $f" >&2; exit 13; fi
size=$(stat -c %s -- "$f") || exit 13
if [ "$size" -gt "$2" ]; then echo "$size"; exit 27; fi
exec base64 -w 0 -- "$f"
"""
_WRITE = r"""
f=$1
if [ -d "$f" ]; then echo "Is a directory: $f" >&2; exit 21; fi
d=$(dirname -- "$f")
mkdir -p -- "$d" 2>/dev/null || { echo "Permission denied: cannot create $d" >&2; exit 13; }
if [ -e "$f" ] && [ ! -w "$f" ]; then echo "Permission denied: $f" >&2; exit 13; fi
cat > "$f" 2>/dev/null || { echo "Permission denied: $f" >&2; exit 13; }
"""
_CWD = 'cd -- "$1" || exit 2; shift; exec "$@"'
"""Wrapper for a call with its own working directory; launched by absolute path, and the command
itself resolved by the shell through the sandbox's PATH (with the call's env applied first)."""

_ERRORS: dict[int, type[OSError]] = {2: FileNotFoundError, 13: PermissionError, 21: IsADirectoryError}


class Box:
    """One harness session and its sandbox; thread-safe; close() removes every container it made."""

    def __init__(
        self, config: BoxConfig | None = None, *, name: str = "box", labels: Mapping[str, str] | None = None
    ) -> None:
        from harness.api import default_state_dir
        from harness.assembly.sessions import box_session, session_config

        self.config = config or BoxConfig()
        self.sessions = (self.config.state_dir or default_state_dir()).resolve()
        session_id = f"{_slug(name)}-{uuid.uuid4().hex[:10]}"
        self._lock = threading.Lock()
        with tempfile.TemporaryDirectory(prefix="harness-box-") as empty:
            repo = self.config.repo if self.config.repo is not None else Path(empty)
            self.sandbox, self.session = box_session(
                repo,
                self.sessions,
                spec=self.config.spec(labels or {}),
                config=session_config(
                    self.config.session, writable_root=self.config.writable_root, keep_tmp=self.config.writable_root
                ),
                docker_host=self.config.docker_host,
                run_id=self.config.run_id or session_id,
                session_id=session_id,
                pool_size=2,
            )
        self.workdir = self.session.spec.workdir
        self.closed = False
        self._calls = 0
        self._trajectory = _Record(self.session.dir, session_id, name, str(self.config.repo or ""))

    @property
    def id(self) -> str:
        return self.session.id

    # --- calls --------------------------------------------------------------------------------------

    def exec(
        self,
        argv: Sequence[str],
        *,
        stdin: bytes | None = None,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout_s: float | None = None,
        output_cap: int = CALL_OUTPUT_CAP,
        note: str | None = None,
    ) -> Envelope:
        """Run argv in a fresh container (cwd relative to the workspace; env on top of the sandbox's
        fixed environment); commit what it changed as the session's next step."""
        from sandbox.errors import SpecError

        if not argv:
            raise SpecError("nothing to run: the command is empty")
        command = list(argv)
        if cwd:
            command = ["/bin/sh", "-c", _CWD, "harness-cwd", cwd, *command]
        if env:
            bad = [key for key in env if not key or "=" in key or "\0" in key]
            if bad:
                raise SpecError(f"not an environment variable name: {bad[0]!r}")
            command = ["/usr/bin/env", *(f"{key}={value}" for key, value in env.items()), *command]
        return self._call(command, stdin, timeout_s, output_cap, note or shlex.join(argv))

    def read_file(self, path: str, *, limit: int) -> bytes:
        """The file's bytes as the sandbox user sees it; FileNotFoundError, PermissionError,
        IsADirectoryError or FileTooLarge (above limit bytes) otherwise, each naming the path."""
        import base64

        envelope = self._call(
            ["/bin/sh", "-c", _READ, "harness-read", path, str(limit)],
            None,
            None,
            limit * 4 // 3 + 1024,
            None,
        )
        if envelope.exit_code == 27:
            raise FileTooLarge(path, int(envelope.stdout.strip() or 0), limit)
        self._raise_for(envelope, path, "read")
        return base64.b64decode(envelope.stdout)

    def write_file(self, path: str, data: bytes) -> None:
        """Create or replace the file (and its parent folders) as the sandbox user."""
        envelope = self._call(["/bin/sh", "-c", _WRITE, "harness-write", path], data, None, 64 * 1024, f"write {path}")
        self._raise_for(envelope, path, "write")

    def _call(
        self, command: list[str], stdin: bytes | None, timeout_s: float | None, cap: int, note: str | None
    ) -> Envelope:
        if self.closed:
            from sandbox.errors import SandboxError

            raise SandboxError(f"session {self.id} is closed")
        base = self.session.spec
        spec = base.model_copy(
            update={
                "timeout_s": timeout_s or self.config.timeout_s,
                "stdout_cap": max(cap, 256),
                "stderr_cap": max(min(cap, CALL_OUTPUT_CAP), 256),
                "output_ceiling": max(base.output_ceiling, 2 * cap + 1024**2),
            }
        )
        writable = self.session.config.writable_root
        envelope = self.sandbox.run(
            command, workspace=self.session.workspace, spec=spec, stdin=stdin, commit_changes=writable
        )
        if note is not None:
            with self._lock:
                self.session.commit_step(note[:200], committed_image=envelope.committed_image, skip_unchanged=True)
                self._calls += 1
                self._trajectory.call(self._calls, note, envelope, self.session.step)
        return envelope

    @staticmethod
    def _raise_for(envelope: Envelope, path: str, verb: str) -> None:
        if envelope.status == "timeout":
            raise TimeoutError(f"{verb} {path}: timed out")
        if envelope.exit_code == 0:
            return
        kind = _ERRORS.get(envelope.exit_code)
        message = envelope.stderr.strip() or f"cannot {verb} {path} (exit {envelope.exit_code})"
        if kind is not None:
            raise kind(envelope.exit_code, message, path)
        raise OSError(errno.EIO, message, path)

    # --- the end ------------------------------------------------------------------------------------

    def close(self) -> None:
        """Remove every container of the session (by label too, as a safety net); the session folder
        stays unless keep_session is off."""
        from harness.assembly import engine
        from sandbox import labels
        from sandbox.errors import SandboxError

        if self.closed:
            return
        self.closed = True
        self._trajectory.close(self._calls)
        try:
            self.sandbox.close()
            with contextlib.suppress(SandboxError):
                engine.prune_containers(self.config.docker_host, everything=True, extra={labels.SESSION: self.id})
        finally:
            if self.config.keep_session:
                self.session.close()
            else:
                self.session.delete()

    def __enter__(self) -> Box:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _slug(name: str) -> str:
    cleaned = "".join(ch if ch.isalnum() or ch in "-_" else "-" for ch in name.lower()).strip("-_")
    return (cleaned or "box")[:40]


class _Record:
    """The box's calls as a trajectory (a start, each call that may change something as a tool call
    and a step, the end), so `harness show` and `harness view` read a box's session like a run's."""

    def __init__(self, folder: Path, session_id: str, name: str, repo: str) -> None:
        from harness.trajectory import StartRecord, Trajectory

        self._trajectory = Trajectory(folder)
        self._trajectory.append(
            StartRecord(session_id=session_id, task=f"calls from {name}", model=f"external:{name}", repo=repo),
            durable=True,
        )

    def call(self, step: int, note: str, envelope: Envelope, snapshot: int) -> None:
        from harness.trajectory import StepRecord, ToolRecord

        output = (envelope.stdout + envelope.stderr)[-4000:]
        self._trajectory.append(
            ToolRecord(
                step=step,
                call_id=f"call-{step}",
                name="exec",
                arguments={"command": note},
                envelope=envelope,
                text=f"{envelope.headline()}\n{output}".rstrip(),
                is_error=envelope.exit_code != 0,
                error_kind=None if envelope.exit_code == 0 else envelope.status,
                duration_ms=envelope.duration_ms,
                wrote=True,
            )
        )
        self._trajectory.append(StepRecord(step=step, snapshot_step=snapshot, wrote=True), durable=True)

    def close(self, calls: int) -> None:
        from harness.trajectory import OutcomeRecord

        self._trajectory.append(OutcomeRecord(outcome="closed", detail=f"{calls} call(s)"), durable=True)
        self._trajectory.close()
