"""A session's records read back as plain JSON, for what only shows them.

`harness show`, `harness session list` and the end-of-run trace print what a run recorded; they act on
none of it. Validating every record into its pydantic model (harness.trajectory) costs more than the
rest of such a command: the models' schemas are built at import, and a reader that builds none starts
in a third of the time (`harness bench commands`). So the views read the same files here as dicts,
with the record's defaults where a line leaves a field out, and anything that acts on a session (a
resume, a fork, a replay, a report's metrics) still reads it through the models.

What the models and the views both say (a sub-agent's reserve and change, an old outcome's spelling,
the tokens of a result, the exit code of an unfinished run) is said once, here, and the models call it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.causes import INFRA_CAUSES
from harness.errors import SessionError
from sandbox.durable import read_lines
from sandbox.exit_code import ExitCode
from sandbox.layout import SessionFolder

EVERY_AGENT = "*"
"""`records(..., agent=EVERY_AGENT)`: the run's own records and every sub-agent's, in file order."""

LEGACY_OUTCOMES = {"sandbox_error": "infra_error"}
"""Outcomes as earlier versions spelled them in results and records, and what they are now."""

OUTCOME_EXIT_CODES: dict[str, ExitCode] = {
    "verified": ExitCode.OK,
    "unverified": ExitCode.UNVERIFIED,
    "failed_verification": ExitCode.FAILED_VERIFICATION,
    "stuck": ExitCode.STUCK,
    "limit": ExitCode.LIMIT,
    "model_error": ExitCode.MODEL_ERROR,
    "state_error": ExitCode.STORAGE,
    "infra_error": ExitCode.SANDBOX,
    "interrupted": ExitCode.INTERRUPTED,
    "incomplete": ExitCode.INTERRUPTED,
}
"""Exit code of `harness run`/`resume` per outcome kind; every `limit:<which>` exits 13."""


def records(session_dir: Path, agent: str | None = EVERY_AGENT) -> list[dict[str, Any]]:
    """The trajectory's records as dicts: the run's own agent's (agent=None), one sub-agent's, or the
    whole tree's (EVERY_AGENT). A torn last line is dropped; damage before it, or a line that is not a
    record, is a SessionError naming the file (as the models' reader says it)."""
    path = SessionFolder(Path(session_dir)).trajectory
    try:
        every = read_lines(path)
    except ValueError as error:
        raise SessionError(
            f"the trajectory {path} is damaged and cannot be read back: {error}".splitlines()[0]
        ) from None
    for number, line in enumerate(every, 1):
        if not isinstance(line, dict) or not isinstance(line.get("kind"), str):
            raise SessionError(f"the trajectory {path} is damaged and cannot be read back: record {number} is not one")
    return every if agent == EVERY_AGENT else [line for line in every if line.get("agent") == agent]


def sessions(state_dir: Path) -> list[dict[str, Any]]:
    """session.json of every session in state_dir, oldest first: a folder whose record does not read,
    or names no id, repository and creation time, is not one."""
    found = []
    for path in Path(state_dir).glob(f"*/{SessionFolder(Path()).info.name}"):
        try:
            info = json.loads(path.read_bytes())
        except (OSError, ValueError):
            continue
        if (
            isinstance(info, dict)
            and isinstance(info.get("id"), str)
            and isinstance(info.get("repo"), str)
            and isinstance(info.get("created"), int | float)
            and not isinstance(info.get("created"), bool)
        ):
            found.append(info)
    return sorted(found, key=lambda info: (info["created"], info["id"]))


def state(session_dir: Path) -> dict[str, Any] | None:
    """state.json as a dict, or None when the session never had a run."""
    return _object(SessionFolder(Path(session_dir)).state, "session_id", str, "a run's state")


ATTEMPTS_FILE = "attempts.json"
"""In the session folder of a run of attempts (`--attempts K`): what each did, which was chosen, why."""


def attempts(session_dir: Path) -> dict[str, Any] | None:
    """attempts.json as a dict, or None when the run was no run of attempts."""
    return _object(Path(session_dir) / ATTEMPTS_FILE, "attempts", list, "a run's attempts")


def _object(path: Path, key: str, kind: type, what: str) -> dict[str, Any] | None:
    """A JSON object file holding key of kind, or None when there is no file; SessionError naming the
    file when it is damaged or something else."""
    if not path.exists():
        return None
    try:
        found = json.loads(path.read_bytes())
    except (OSError, ValueError) as error:
        raise SessionError(f"{path} is damaged and cannot be read back ({type(error).__name__})") from None
    if not isinstance(found, dict) or not isinstance(found.get(key), kind):
        raise SessionError(f"{path} is damaged and cannot be read back (not {what})")
    return found


def result(session_dir: Path, found: dict[str, Any] | None = None) -> dict[str, Any]:
    """The run's final result object; for a run that never finished, one built from its last state
    (what `harness show --json` prints for it, through the model). found: the state already read."""
    found = state(session_dir) if found is None else found
    if found is None:
        raise FileNotFoundError(f"no run recorded in {session_dir}")
    if isinstance(found.get("result"), dict):
        done = dict(found["result"])
        done["outcome"] = current_outcome(str(done.get("outcome", "")))
        return done
    spent = mapping(found.get("spent"))
    return {
        "session_id": found["session_id"],
        "outcome": "incomplete",
        "detail": "the run did not finish; resume it",
        "evidence": None,
        "exit_code": int(OUTCOME_EXIT_CODES["interrupted"]),
        "cause": None,
        "verified": False,
        "steps": count(found.get("step")),
        "subagent_steps": 0,
        "tokens": tokens(spent),
        "cost_usd": amount(spent.get("cost_usd")),
        "elapsed_s": amount(spent.get("elapsed_s")),
        "verify_rounds": count(found.get("verify_rounds")),
        "patch": None,
        "session_dir": str(session_dir),
    }


def current_outcome(outcome: str) -> str:
    """An outcome in today's spelling (`sandbox_error` is `infra_error`)."""
    return LEGACY_OUTCOMES.get(outcome, outcome)


def is_infra(outcome: str, cause: str | None) -> bool:
    """Whether a task-run ended by the machine's fault (the sandbox, or an unreachable endpoint):
    left out of the completion rate, counted apart."""
    return current_outcome(outcome) == "infra_error" or cause in INFRA_CAUSES


def tokens(spent: Mapping[str, Any]) -> dict[str, int]:
    """A result's `tokens` from what a run spent: input, output, cached, and `estimated` (the part
    harness counted where the server reported no usage) when there is one."""
    counts = {
        "input": count(spent.get("input_tokens")),
        "output": count(spent.get("output_tokens")),
        "cached": count(spent.get("cached_input_tokens")),
    }
    estimated = count(spent.get("estimated_tokens"))
    return counts | ({"estimated": estimated} if estimated else {})


def reserve_text(reserve: Mapping[str, Any]) -> str:
    """A sub-agent's reserve as the views say it (`max_steps 6, max_tokens 550`)."""
    return ", ".join(f"{key} {value:g}" for key, value in reserve.items() if isinstance(value, int | float))


def change_text(change: str, paths: list[str], conflicts: list[str]) -> str:
    """What became of a sub-agent's change, as the views say it."""
    return {
        "applied": f"change applied: {', '.join(paths[:10])}",
        "conflict": f"change NOT applied, conflicts: {', '.join(conflicts[:10])}",
        "discarded": "change discarded, as asked",
        "none": "no change",
    }.get(change, "")


def whose(place: str) -> str:
    """Whose a hook was, by where it ran, as the views say it."""
    return "the repository's, in a container" if place == "container" else "yours"


def count(value: Any) -> int:
    """A count as recorded; anything else (a damaged or missing field) is 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def amount(value: Any) -> float:
    """A cost or a duration as recorded; anything else is 0.0."""
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def string(value: Any) -> str:
    """A recorded string (None: empty; anything else as it prints)."""
    return value if isinstance(value, str) else "" if value is None else str(value)


def mapping(value: Any) -> dict[str, Any]:
    """A recorded object; anything else is empty."""
    return value if isinstance(value, dict) else {}


def items(value: Any) -> list[Any]:
    """A recorded list; anything else is empty."""
    return value if isinstance(value, list) else []
