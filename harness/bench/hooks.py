"""`harness bench hooks`: what a user's hook on this machine can cost the controller, on real runs.

1. Memory: a run of the example whose PreToolUse hook prints 1 GB (on stderr, then lets the call
   through), side by side with the same run whose hook prints nothing: the controller's peak
   resident memory (its own, as the kernel reports it when it ends). Target: within 20 MB.
2. Hold: a hook that answers at once but leaves a `setsid` daemon holding its pipes, and one that
   never answers (timeout 2 s) beside such a daemon: how long each held its call (the hook's record).
   Target: the hook's timeout plus 2 s.
Each run is the real `harness run` process (a scripted model, real containers).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import tempfile
from pathlib import Path

import yaml
from pydantic import BaseModel

from harness.bench.measure import CLI, cli_env
from harness.trajectory import HookRecord, read_records

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "calc"
HOLD_TIMEOUT_S = 2.0
PRINTED = 1024**3


class HooksBench(BaseModel):
    rounds: int
    quiet_peak_mb: float
    """Median peak resident memory of the controller with a hook that prints nothing."""
    loud_peak_mb: float
    """...with a hook that prints 1 GB."""
    peak_over_quiet_mb: float
    """loud - quiet (target: <= 20)."""
    daemon_hold_s: float
    """A hook that exits at once leaving a daemon holding its pipes: how long its call waited."""
    timeout_hold_s: float
    """A hook that never answers (its timeout HOLD_TIMEOUT_S) beside such a daemon."""
    hold_bound_s: float
    """The target for both: the hook's timeout plus 2 s."""


def _run(folder: Path, name: str, hook: str, timeout_s: float, run_id: str) -> tuple[float, list[HookRecord]]:
    """One `harness run` with the hook: (the controller's peak resident MB, its hook records)."""
    config = folder / f"{name}.toml"
    config.write_text(f"[[hooks.PreToolUse]]\nmatcher = 'run_command'\ncommand = '''{hook}'''\ntimeout = {timeout_s}\n")
    script = folder / "script.yaml"
    script.write_text(
        yaml.safe_dump(
            {
                "turns": [
                    {"text": "Running.", "tool_calls": [{"name": "run_command", "arguments": {"command": "true"}}]},
                    {"text": "Done."},
                ]
            }
        )
    )
    sessions = folder / "sessions"
    argv = [*CLI, "run", "--image", "py311", "--model", f"scripted:{script}", str(EXAMPLE), "--task", "t",
            "--no-verify", "--config", str(config), "--session", name, "--state-dir", str(sessions)]  # fmt: skip
    process = subprocess.Popen(
        argv, env=cli_env(HARNESS_RUN_ID=run_id), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    assert process.stderr is not None
    err = process.stderr.read()
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode not in (0, 10):
        raise RuntimeError(
            f"the bench's run ({name}) exited {process.returncode}: {err.decode(errors='replace')[-400:]}"
        )
    hooks = [r for r in read_records(sessions / name) if isinstance(r, HookRecord)]
    return usage.ru_maxrss / 1024, hooks


def measure(run_id: str, rounds: int = 3) -> HooksBench:
    """Rounds of the quiet and the loud hook interleaved, then the two holds."""
    quiet, loud = [], []
    with tempfile.TemporaryDirectory(prefix="harness-bench-hooks-") as scratch:
        folder = Path(scratch)
        for n in range(rounds):
            quiet.append(_run(folder, f"quiet{n}", "true", 60, run_id)[0])
            loud.append(_run(folder, f"loud{n}", f"head -c {PRINTED} /dev/zero >&2", 120, run_id)[0])
        daemon = "setsid sh -c 'exec sleep 300' & exit 0"
        _, held = _run(folder, "daemon", daemon, HOLD_TIMEOUT_S, run_id)
        _, timed = _run(folder, "timeout", "setsid sh -c 'exec sleep 300' & sleep 300", HOLD_TIMEOUT_S, run_id)
    quiet_mb, loud_mb = statistics.median(quiet), statistics.median(loud)
    return HooksBench(
        rounds=rounds,
        quiet_peak_mb=round(quiet_mb, 1),
        loud_peak_mb=round(loud_mb, 1),
        peak_over_quiet_mb=round(loud_mb - quiet_mb, 1),
        daemon_hold_s=round(max(r.duration_ms for r in held) / 1000, 2),
        timeout_hold_s=round(max(r.duration_ms for r in timed) / 1000, 2),
        hold_bound_s=HOLD_TIMEOUT_S + 2,
    )
