"""`harness env serve`: episodes of a task, driven over OpenEnv's protocol (openenv-core's own client
works against it unchanged), on 127.0.0.1 behind a token.

A client connects to `ws://127.0.0.1:PORT/TOKEN/ws` (its base URL is `http://127.0.0.1:PORT/TOKEN`:
the token is part of the address it was given, since OpenEnv's client sends no header) and sends
JSON messages:

- `{"type": "reset", "data": {"task_id": ID}}`: a new episode, a new session of that task (the tasks
  file's entry; the only task when there is one): its workspace copy and setup, as `harness run` makes
  them. The observation names the session, the task's words, the verify command and the tools.
- `{"type": "step", "data": {"tool": NAME, "arguments": {...}}}`: one tool call, run as the loop runs
  a model's (the gate, hooks, a fresh container, the user's limits and egress rules, a step and its
  snapshot); the observation is the call's result, its envelope's exit code first. `{"tool":
  "submit"}` ends the episode: the session verifies, and the reward is 1.0 when it verified, else 0.0
  (`score`: the fraction of tests passing when the verify command's output counts them).
- `{"type": "state"}`: the episode's id (its session), step count, task and whether it is done.
- `{"type": "close"}`, or the connection going: an episode not ended is ended as at `submit`.

Each connection has its own episode and session, in a thread of its own: many run at once. Each is a
normal session afterwards (`harness show`, `view`, `export`).
"""

from __future__ import annotations

import hmac
import json
import re
import secrets
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.agent.outcome import RunResult
from harness.assembly import served
from harness.assembly.runtime import Runtime
from harness.config import RunConfig
from harness.errors import HarnessError, UsageError
from harness.trajectory import VerifyRecord, read_records

MODEL = "openenv:client"
"""The model an episode's record names: its turns are an environment client's calls."""

SUBMIT = "submit"
"""The action that ends an episode: the session verifies and the reward is given."""

STEPS = 200
"""Tool calls an episode may make unless its task says otherwise."""


@dataclass(frozen=True)
class EnvTask:
    """A task episodes are made of: the repository, the words, the config a session of it runs with."""

    id: str
    repo: Path
    text: str
    config: RunConfig


class Episode:
    """One episode: a served session of a task (harness.assembly.served), each step one tool call."""

    def __init__(self, task: EnvTask, sessions: Path, runtime: Runtime) -> None:
        self.task = task
        self.run = served.start(task.repo, task.config, sessions, runtime, None, task.text, model=MODEL)
        self.run.wait_ready()  # the workspace copied and set up; a failed setup raised here
        agent = self.run.served.agent
        assert agent is not None
        self.session_id = agent.state.session_id
        self.steps = 0
        self.result: RunResult | None = None
        self._lock = threading.Lock()

    @property
    def done(self) -> bool:
        return self.result is not None

    def first(self) -> dict[str, Any]:
        """The reset's answer."""
        tools = [
            {"name": schema.name, "description": schema.description, "parameters": schema.parameters}
            for schema in self.run.served.schemas
        ]
        observation = {
            "session_id": self.session_id,
            "task_id": self.task.id,
            "task": self.task.text,
            "verify": self.task.config.verify,
            "tools": [*tools, {"name": SUBMIT, "description": "End the episode: the session verifies."}],
            "step": 0,
        }
        return {"observation": observation, "reward": None, "done": False}

    def step(self, action: Mapping[str, Any]) -> dict[str, Any]:
        """One action's answer: a call's result, or the episode's end."""
        with self._lock:
            if self.result is not None:
                raise HarnessError(f"episode {self.session_id} has ended: reset for a new one")
            name = action.get("tool", action.get("name"))
            arguments = action.get("arguments") or {}
            if not isinstance(name, str) or not name:
                raise UsageError('a step is {"tool": NAME, "arguments": {...}} (or {"tool": "submit"})')
            if not isinstance(arguments, dict):
                raise UsageError(f"the arguments of {name} must be an object, not {type(arguments).__name__}")
            if name == SUBMIT:
                return self._end("the client submitted")
            record = self.run.served.call(name, arguments)
            if record is None:  # the session ended by itself (a limit): the episode with it
                return self._end("the session ended")
            self.steps += 1
            envelope = getattr(record, "envelope", None)
            observation = {
                "tool": name,
                "output": record.text,
                "is_error": record.is_error,
                "exit_code": envelope.exit_code if envelope is not None else None,
                "step": self.steps,
            }
            return {"observation": observation, "reward": None, "done": False}

    def end(self, why: str) -> dict[str, Any]:
        """The episode ended as at submit (a client gone, a reset over it); its last answer."""
        with self._lock:
            if self.result is not None:
                return self._final()
            return self._end(why)

    def state(self) -> dict[str, Any]:
        return {
            "episode_id": self.session_id,
            "step_count": self.steps,
            "task_id": self.task.id,
            "done": self.done,
            "outcome": self.result.outcome if self.result is not None else None,
        }

    def _end(self, why: str) -> dict[str, Any]:
        self.result = self.run.end(why)
        return self._final()

    def _final(self) -> dict[str, Any]:
        result = self.result
        assert result is not None
        reward = 1.0 if result.verified else 0.0
        session_dir = Path(result.session_dir)
        rounds = [r for r in read_records(session_dir) if isinstance(r, VerifyRecord) and r.layer == "verify"]
        score = graded(rounds[-1].output) if rounds else None
        observation = {
            "session_id": self.session_id,
            "outcome": result.outcome,
            "detail": result.detail,
            "verified": result.verified,
            "score": reward if result.verified or score is None else score,
            "steps": self.steps,
            "patch": Path(result.patch).read_text(encoding="utf-8", errors="replace") if result.patch else "",
        }
        return {"observation": observation, "reward": reward, "done": True}


_COUNTS = re.compile(r"(\d+) (passed|failed|errors?)\b")
_JEST = re.compile(r"^Tests:\s+(?:(\d+) failed, )?(?:\d+ skipped, )?(\d+) passed, (\d+) total", re.MULTILINE)


def graded(output: str) -> float | None:
    """The fraction of tests passing that a test runner's summary line says (pytest's `3 passed, 1
    failed`, jest's `Tests: 1 failed, 3 passed, 4 total`); None when it says none."""
    jest = _JEST.search(output)
    if jest:
        total = int(jest.group(3))
        return round(int(jest.group(2)) / total, 4) if total else None
    lines = [line for line in output.splitlines() if _COUNTS.search(line)]
    if not lines:
        return None
    counts: dict[str, int] = {}
    for number, what in _COUNTS.findall(lines[-1]):
        counts["error" if what.startswith("error") else what] = int(number)
    total = sum(counts.values())
    return round(counts.get("passed", 0) / total, 4) if total else None


class Environments:
    """The server's tasks and what it makes their episodes with; the ASGI app (`app`)."""

    def __init__(self, tasks: list[EnvTask], sessions: Path, runtime_of: Callable[[RunConfig], Runtime]) -> None:
        if not tasks:
            raise UsageError("no task to serve: give a tasks file with at least one task, or a repository and --task")
        self.tasks = {task.id: task for task in tasks}
        self.sessions, self.runtime_of = sessions, runtime_of
        self.token = secrets.token_urlsafe(32)
        self.episodes: list[str] = []
        """The sessions of every episode served, in the order they started."""

    def task(self, data: Mapping[str, Any]) -> EnvTask:
        wanted = data.get("task_id")
        if wanted is None:
            if len(self.tasks) == 1:
                return next(iter(self.tasks.values()))
            raise UsageError(f"reset names no task_id, and there are {len(self.tasks)}: {', '.join(self.tasks)}")
        if wanted not in self.tasks:
            raise UsageError(f"no task {str(wanted)[:80]!r}: the tasks are {', '.join(list(self.tasks)[:20])}")
        return self.tasks[wanted]

    def episode(self, data: Mapping[str, Any]) -> Episode:
        task = self.task(data)
        episode = Episode(task, self.sessions, self.runtime_of(task.config))
        self.episodes.append(episode.session_id)
        return episode

    def app(self) -> Any:
        """Starlette's app: the episodes' WebSocket and a health check, under the token's path."""
        from starlette.applications import Starlette
        from starlette.responses import JSONResponse
        from starlette.routing import Route, WebSocketRoute

        async def health(request: Any) -> Any:
            return JSONResponse({"status": "healthy", "tasks": list(self.tasks)})

        routes = [Route("/health", health), WebSocketRoute("/ws", self._socket)]
        return Token(Starlette(routes=routes), self.token)

    async def _socket(self, websocket: Any) -> None:
        import anyio.to_thread
        from starlette.websockets import WebSocketDisconnect

        await websocket.accept()
        episode: Episode | None = None
        try:
            while True:
                text = await websocket.receive_text()
                try:
                    message = json.loads(text)
                    if not isinstance(message, dict):
                        raise ValueError("a message is a JSON object")
                except ValueError as error:
                    await websocket.send_text(_error(f"invalid JSON: {error}", "INVALID_JSON"))
                    continue
                kind, data = message.get("type"), message.get("data") or {}
                try:
                    if not isinstance(data, dict):
                        raise UsageError("a message's data is a JSON object")
                    if kind == "close":
                        break
                    if kind == "reset":
                        if episode is not None:
                            await anyio.to_thread.run_sync(episode.end, "the client reset the environment")
                        episode = await anyio.to_thread.run_sync(self.episode, data)
                        answer = {"type": "observation", "data": episode.first()}
                    elif kind == "step":
                        if episode is None:
                            raise UsageError("no episode: send reset first")
                        answer = {"type": "observation", "data": await anyio.to_thread.run_sync(episode.step, data)}
                    elif kind == "state":
                        answer = {"type": "state", "data": episode.state() if episode is not None else {}}
                    else:
                        raise UsageError(f"unknown message type {str(kind)[:40]!r}: reset, step, state or close")
                except HarnessError as error:
                    await websocket.send_text(_error(str(error), type(error).__name__))
                    continue
                await websocket.send_text(json.dumps(answer, default=str))
        except WebSocketDisconnect:
            pass
        finally:
            if episode is not None and not episode.done:
                await anyio.to_thread.run_sync(episode.end, "the client went")


def _error(message: str, code: str) -> str:
    return json.dumps({"type": "error", "data": {"message": message[:2000], "code": code}})


class Token:
    """An ASGI app serving only paths under `/TOKEN/` (the prefix taken off); anything else is refused:
    403 to an HTTP request, a close (1008) to a WebSocket before it is accepted."""

    def __init__(self, app: Any, token: str) -> None:
        self.app, self.prefix = app, f"/{token}".encode()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        path = scope.get("raw_path") or scope.get("path", "").encode()
        head, slash, rest = path.partition(b"/")[2].partition(b"/")
        if not hmac.compare_digest(b"/" + head, self.prefix):
            if scope["type"] == "websocket":
                await send({"type": "websocket.close", "code": 1008, "reason": "harness env serve: the token is wrong"})
                return
            body = b'{"error": "harness env serve: the address needs the token it printed"}'
            await send({"type": "http.response.start", "status": 403, "headers": [
                (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})  # fmt: skip
            await send({"type": "http.response.body", "body": body})
            return
        inner = "/" + rest.decode("utf-8", "replace") if slash else "/"
        await self.app({**scope, "path": inner, "raw_path": inner.encode(), "root_path": ""}, receive, send)


def serve(environments: Environments, address: tuple[str, int], on_listening: Callable[[str], None]) -> None:
    """Serve on address (loopback) until stopped; on_listening(base_url) once it listens: the URL an
    OpenEnv client is given (the token in its path)."""
    import uvicorn

    listener, host, port = served.listening_socket(address)
    config = uvicorn.Config(environments.app(), log_level="error", lifespan="off", access_log=False, ws="wsproto")

    class Told(uvicorn.Server):
        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets)
            on_listening(f"http://{host}:{port}/{environments.token}")

    with listener:
        Told(config).run(sockets=[listener])


def episode_config(config: RunConfig, repo: Path, limits_given: bool) -> RunConfig:
    """A task's config as its episodes run it: the client's turns, one verification at the end (the
    client is not there to be sent a failure), the setup and verify command detected as `harness run`
    detects them, and STEPS calls unless the task set its own limits."""
    from harness import assembly

    config = config.model_copy(update={"model": MODEL, "agent": None})
    limits = config.limits.model_copy(update={"max_verify_rounds": 1, **({} if limits_given else {"max_steps": STEPS})})
    config = config.model_copy(update={"limits": limits, "attempts": config.attempts.model_copy(update={"count": 1})})
    return assembly.with_setup(assembly.with_verify(config, repo), repo)


def tasks_of_file(path: Path, sessions: Path, max_steps: int | None = None) -> list[EnvTask]:
    """The tasks of a tasks file (as `harness batch` reads it: its defaults, each task's keys over
    them), each with the config its episodes run with (max_steps: `--max-steps` over every task's)."""
    from harness.batch.records import TaskRunKey
    from harness.batch.tasks import load_tasks
    from harness.batch.worker import TaskRunSpec, run_config

    tasks = load_tasks(path)
    found = []
    for task in tasks.tasks:
        key = TaskRunKey(task_id=task.id, model=MODEL, run_index=0)
        spec = TaskRunSpec(key=key, task=task, defaults=tasks.defaults, sessions=sessions, run_id="")
        given = bool(task.limits.model_dump(exclude_none=True) or tasks.defaults.limits.model_dump(exclude_none=True))
        config = run_config(spec)
        if max_steps:
            config = config.model_copy(update={"limits": config.limits.model_copy(update={"max_steps": max_steps})})
        found.append(
            EnvTask(task.id, task.repo, task.task, episode_config(config, task.repo, given or bool(max_steps)))
        )
    return found
