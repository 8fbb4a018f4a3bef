"""`harness bench rollouts`: how many episodes of the offline example `harness env serve` completes a
minute with 1, 4 and 8 running at once, and what one step of an episode costs against one step of
harness's own loop, side by side in one run.

An episode is what a trainer's would be: reset (a session of the example: its copy, step 0), a few
`run_command` calls, the fix by `apply_patch`, `submit` (the verification; reward 1). Episodes are
driven through `Environments.episode` and `Episode.step`, the calls the server's WebSocket handler
makes for each message (the JSON hop itself is left out: it is the same for any environment).

The step's cost: the same `run_command` calls made by harness's own loop with a scripted model on
the same example, per step the time from one model turn to the next (the whole step: gate, container,
record, snapshot) less the model's think time; for an episode, the time a step call takes. Both sides
think PAUSE_S before each call, as a policy model generating its next action would (without it the
calls come faster than the warm pool refills, on either side). The ratio is median over median.
Episodes per minute are measured without a pause: the most a trainer could ask.
"""

from __future__ import annotations

import itertools
import tempfile
import threading
import time
from pathlib import Path

import yaml
from pydantic import BaseModel

from harness import assembly
from harness.assembly import Runtime
from harness.bench.integrations import PAUSE_S
from harness.bench.measure import Latency, latency
from harness.bench.run import EXAMPLE, TASK, VERIFY
from harness.config import RunConfig
from harness.rollouts.server import Environments, EnvTask, episode_config
from harness.trajectory import TurnRecord, read_records

FIX = {
    "path": "calc/ops.py",
    "old_text": '    """Return the sum of a and b."""\n    return a - b\n',
    "new_text": '    """Return the sum of a and b."""\n    return a + b\n',
}


def command(n: int) -> dict[str, str]:
    """The n-th call's arguments: a different command each time (the same call again and again is a
    loop harness's own repetition check ends)."""
    return {"command": f"head -n {n + 1} calc/ops.py"}


class Level(BaseModel):
    """Episodes run with `at_once` of them running at a time."""

    at_once: int
    episodes: int
    seconds: float
    per_minute: float
    rewarded: int
    """Episodes that ended with reward 1 (every one should)."""


class RolloutFigures(BaseModel):
    image: str
    steps: int
    """run_command calls per episode (and per loop run), before the fix."""
    levels: list[Level]
    episode_step: Latency
    loop_step: Latency
    episode_over_loop: float
    load_1m: float


def measure(
    *, image: str = "py311", steps: int = 6, levels: tuple[int, ...] = (1, 4, 8), run_id: str
) -> RolloutFigures:
    import os

    runtime = Runtime(run_id=run_id)
    repo = EXAMPLE / "calc"
    with tempfile.TemporaryDirectory(prefix="harness-bench-rollouts-") as tmp:
        sessions = Path(tmp) / "sessions"
        base = RunConfig(image=image, verify=VERIFY)
        task = EnvTask("calc", repo, TASK, episode_config(base, repo, False))
        environments = Environments([task], sessions, lambda config: runtime)
        step_ms: list[float] = []
        found = []
        _episode(environments, steps, [])  # one not counted: imports, image look-ups
        for _ in range(2):  # a step's cost: episodes one at a time, as the loop's runs are
            _episode(environments, steps, step_ms, pause_s=PAUSE_S)
        for at_once in levels:
            rewards: list[float] = []

            def one(into: list[float] = rewards) -> None:
                into.append(_episode(environments, steps, []))

            started = time.monotonic()
            workers = [threading.Thread(target=one) for _ in range(at_once)]
            for worker in workers:
                worker.start()
            for worker in workers:
                worker.join()
            seconds = time.monotonic() - started
            found.append(
                Level(
                    at_once=at_once,
                    episodes=at_once,
                    seconds=round(seconds, 2),
                    per_minute=round(at_once / seconds * 60, 1),
                    rewarded=sum(1 for r in rewards if r == 1.0),
                )
            )
        loop_ms = _loop_steps(repo, image, steps, sessions, runtime)
    episode, loop = latency(step_ms), latency(loop_ms)
    return RolloutFigures(
        image=image,
        steps=steps,
        levels=found,
        episode_step=episode,
        loop_step=loop,
        episode_over_loop=round(episode.median_ms / loop.median_ms, 2) if loop.median_ms else 0.0,
        load_1m=round(os.getloadavg()[0], 2),
    )


def _episode(environments: Environments, steps: int, step_ms: list[float], pause_s: float = 0.0) -> float:
    """One episode as a trainer's client makes it, thinking pause_s before each call; its reward (the
    step times appended to step_ms)."""
    episode = environments.episode({})
    try:
        for n in range(steps):
            time.sleep(pause_s)
            started = time.monotonic()
            episode.step({"tool": "run_command", "arguments": command(n)})
            step_ms.append((time.monotonic() - started) * 1000)
        episode.step({"tool": "apply_patch", "arguments": FIX})
        return float(episode.step({"tool": "submit"})["reward"])
    finally:
        episode.end("the bench ended")


def _loop_steps(repo: Path, image: str, steps: int, sessions: Path, runtime: Runtime) -> list[float]:
    """Harness's own loop making the same calls (a scripted model answering at once): each step's
    time from its model turn to the next one's."""
    script = sessions.parent / "loop.yaml"
    turns: list[dict[str, object]] = [
        {"tool_calls": [{"name": "run_command", "arguments": command(n)}], "delay_s": PAUSE_S} for n in range(steps)
    ]
    turns += [{"tool_calls": [{"name": "apply_patch", "arguments": FIX}], "delay_s": PAUSE_S}, {"text": "Fixed add()."}]
    script.write_text(yaml.safe_dump({"turns": turns}))
    measured: list[float] = []
    for round_ in range(3):  # the first not counted, as for the episodes
        config = RunConfig(model=f"scripted:{script}", image=image, verify=VERIFY)
        result = assembly.start_run(repo, TASK, config, sessions, runtime, f"loop{round_}")
        answered = [r.ts for r in read_records(Path(result.session_dir)) if isinstance(r, TurnRecord)]
        if round_:
            measured += [(b - a - PAUSE_S) * 1000 for a, b in itertools.pairwise(answered[: steps + 1])]
    return measured
