"""Spend across runs: the user's daily and monthly ceilings, held by a ledger every run reserves from.

One run's `--max-cost` holds; a night of scheduled runs and batches needs a ceiling over all of them.
The ledger (a JSON-lines file of the user's, locked while it is read and written) has a line per run
as it starts, reserving what it may spend: its own cost limit, never more than what the day's and
the month's ceilings leave (none left: the run does not start). That reservation becomes the run's
cost limit, as a sub-agent's reserve is its limit. When the run ends, a second line says what it
spent, which replaces the reservation. A run that never said (killed): what its session recorded it
spent, once its process is provably gone (sandbox.process), its reservation while it may still live.

The same lines are the user's own history: the forecast before a batch (p50/p90 of cost and steps per
task-run of the same model) is read from them. A model without a known price cannot be held to a
ceiling: such a run is refused when a ceiling is set, and its forecast never says $0.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import statistics
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from harness.config import SpendConfig
from harness.errors import HarnessError
from sandbox.exit_code import ExitCode

LEDGER_NAME = "spend.jsonl"
EPSILON_USD = 0.0001
"""Less than this left is nothing left."""


def default_ledger() -> Path:
    """The per-user ledger (when neither the config nor the environment names one)."""
    import platformdirs

    return Path(platformdirs.user_data_dir("harness")) / LEDGER_NAME


class CeilingReached(HarnessError):
    """A run cannot start: the day's or the month's spend ceiling is reached."""

    exit_code = ExitCode.LIMIT


class PriceUnknown(HarnessError, ValueError):
    """A ceiling is set and the run's model has no known price: what it spends could not be held."""

    exit_code = ExitCode.CONFIG


@dataclass(frozen=True)
class Entry:
    """One run in the ledger: what it reserved and, once it ended, what it spent."""

    id: str
    ts: float
    reserved: float
    model: str = ""
    session: str = ""
    pid: str = ""
    owner: str = ""
    base: float = 0.0
    """What the session had spent before this run of it (a resume's earlier runs count on their own)."""
    spent: float | None = None
    steps: int | None = None
    outcome: str = ""

    def counted(self) -> float:
        """What this run counts against the ceilings: its spend once known, its reservation while its
        process may live, else what its session recorded (a killed run)."""
        if self.spent is not None:
            return self.spent
        from sandbox.process import gone

        if not gone(self.pid, self.owner or None):
            return self.reserved
        recorded = _recorded_spend(Path(self.session)) if self.session else None
        return self.reserved if recorded is None else max(recorded - self.base, 0.0)


@dataclass
class Standing:
    """The ceilings and what is spent (or reserved) against them now."""

    daily_usd: float | None
    monthly_usd: float | None
    today_usd: float = 0.0
    month_usd: float = 0.0
    runs_today: int = 0

    @property
    def left_usd(self) -> float | None:
        """What the ceilings leave (None: no ceiling)."""
        left = [
            c - s for c, s in ((self.daily_usd, self.today_usd), (self.monthly_usd, self.month_usd)) if c is not None
        ]
        return max(min(left), 0.0) if left else None

    def line(self) -> str:
        """Spend against both ceilings, in one line."""
        parts = [f"today ${self.today_usd:.4f}" + (f" of ${self.daily_usd:.2f}" if self.daily_usd is not None else "")]
        parts.append(f"this month ${self.month_usd:.4f}" + (f" of ${self.monthly_usd:.2f}" if self.monthly_usd else ""))
        return ", ".join(parts)


@dataclass(frozen=True)
class Forecast:
    """What the user's past runs of a model say a number of task-runs will cost."""

    model: str
    runs: int
    """Past runs it is drawn from (0: no forecast)."""
    cost_p50: float = 0.0
    cost_p90: float = 0.0
    steps_p50: float = 0.0
    steps_p90: float = 0.0
    planned: int = 0

    def line(self) -> str:
        if not self.runs:
            return f"{self.model}: no past run of it in your ledger to forecast {self.planned} task-run(s) from"
        return (
            f"{self.model}: {self.planned} task-run(s), ${self.cost_p50 * self.planned:.2f} (p50) to "
            f"${self.cost_p90 * self.planned:.2f} (p90); per task-run ${self.cost_p50:.4f}/${self.cost_p90:.4f}, "
            f"{self.steps_p50:g}/{self.steps_p90:g} steps (from your {self.runs} past run(s))"
        )


@dataclass
class Ledger:
    """The ledger file of one user (see the module)."""

    path: Path
    entries: dict[str, Entry] = field(default_factory=dict)

    @contextlib.contextmanager
    def locked(self) -> Iterator[Ledger]:
        """The ledger read whole under its lock, held until the block ends (other runs wait)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path.with_suffix(".lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            self.entries = _read(self.path)
            yield self
        finally:
            os.close(fd)

    def append(self, line: dict[str, object]) -> None:
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(line) + "\n")
            handle.flush()
            os.fsync(handle.fileno())


def standing(config: SpendConfig, ledger: Ledger, now: float | None = None) -> Standing:
    """What is spent today and this month (local time) against the ceilings."""
    now = time.time() if now is None else now
    day, month = _day(now), _month(now)
    found = Standing(daily_usd=config.daily_usd, monthly_usd=config.monthly_usd)
    for entry in ledger.entries.values():
        counted = None
        if _month(entry.ts) == month:
            counted = entry.counted()
            found.month_usd += counted
        if _day(entry.ts) == day:
            found.today_usd += entry.counted() if counted is None else counted
            found.runs_today += 1
    return found


def check_can_start(config: SpendConfig, ledger_path: Path, *, model: str, price_known: bool) -> None:
    """What `reserve` would refuse, asked before anything of a run is made (no session, no container):
    CeilingReached or PriceUnknown; nothing is written."""
    if config.daily_usd is None and config.monthly_usd is None:
        return
    _price_checked(model, price_known)
    with Ledger(Path(ledger_path)).locked() as ledger:
        _left_checked(config, standing(config, ledger))


def _price_checked(model: str, price_known: bool) -> None:
    if not price_known:
        raise PriceUnknown(
            f"{model} has no known price, so the spend ceiling in your config cannot hold its runs: give its "
            'price (`[providers.PREFIX.prices."MODEL"]`) or run it without [spend] ceilings'
        )


def _left_checked(config: SpendConfig, now: Standing) -> float | None:
    """What the ceilings leave (None: no ceiling); CeilingReached when it is nothing."""
    left = now.left_usd
    if left is not None and left < EPSILON_USD:
        which = "daily" if config.daily_usd is not None and now.today_usd >= config.daily_usd else "monthly"
        ceiling = config.daily_usd if which == "daily" else config.monthly_usd
        raise CeilingReached(
            f"the {which} spend ceiling of ${ceiling:.2f} is reached ({now.line()}; spent or reserved by "
            f"{now.runs_today} run(s) today): no run starts until the next "
            f"{'day' if which == 'daily' else 'month'} (local time), or raise [spend] {which}_usd in your config"
        )
    return left


def reserve(
    config: SpendConfig,
    ledger_path: Path,
    *,
    wanted_usd: float | None,
    model: str,
    session: Path,
    price_known: bool,
    base_usd: float = 0.0,
) -> tuple[str, float | None]:
    """Reserve what a run may spend before it starts: (the reservation's id, the run's cost limit:
    wanted_usd within what the ceilings leave; None when neither limits it). CeilingReached when
    nothing is left, PriceUnknown when a ceiling is set and the model has no known price."""
    from sandbox import labels

    if config.daily_usd is not None or config.monthly_usd is not None:
        _price_checked(model, price_known)
    with Ledger(Path(ledger_path)).locked() as ledger:
        left = _left_checked(config, standing(config, ledger))
        limit = wanted_usd if left is None else (left if wanted_usd is None else min(wanted_usd, left))
        ident = uuid.uuid4().hex
        owner = labels.owner()
        ledger.append(
            {
                "kind": "reserve", "id": ident, "ts": time.time(), "usd": limit if limit is not None else 0.0,
                "model": model, "session": str(session), "pid": owner[labels.PID], "owner": owner[labels.OWNER],
                "base": base_usd,
            }
        )  # fmt: skip
    return ident, limit


def settle(ledger_path: Path, ident: str, *, spent_usd: float, steps: int, outcome: str) -> None:
    """What a run spent, replacing its reservation."""
    with Ledger(Path(ledger_path)).locked() as ledger:
        ledger.append(
            {"kind": "settle", "id": ident, "ts": time.time(), "usd": max(spent_usd, 0.0), "steps": steps,
             "outcome": outcome}
        )  # fmt: skip


def forecast(ledger_path: Path, model: str, planned: int) -> Forecast:
    """p50/p90 of cost and steps per task-run from the user's ended runs of model."""
    with Ledger(Path(ledger_path)).locked() as ledger:
        ended = [e for e in ledger.entries.values() if e.model == model and e.spent is not None and e.steps]
    if not ended:
        return Forecast(model=model, runs=0, planned=planned)
    costs = sorted(e.spent or 0.0 for e in ended)
    steps = sorted(float(e.steps or 0) for e in ended)
    return Forecast(
        model=model, runs=len(ended), planned=planned, cost_p50=statistics.median(costs), cost_p90=_p90(costs),
        steps_p50=statistics.median(steps), steps_p90=_p90(steps),
    )  # fmt: skip


def standing_now(config: SpendConfig, ledger_path: Path) -> Standing:
    with Ledger(Path(ledger_path)).locked() as ledger:
        return standing(config, ledger)


def _p90(values: list[float]) -> float:
    return values[min(len(values) - 1, round(0.9 * (len(values) - 1)))]


def _read(path: Path) -> dict[str, Entry]:
    """Every run of the ledger (lines that do not read are skipped: a torn last line, a hand's edit)."""
    entries: dict[str, Entry] = {}
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return entries
    for raw in text.splitlines():
        try:
            line = json.loads(raw)
            ident, usd = str(line["id"]), float(line["usd"])
        except (ValueError, KeyError, TypeError):
            continue
        if not 0 <= usd < float("inf"):
            continue
        if line.get("kind") == "reserve":
            entries[ident] = Entry(
                id=ident, ts=float(line.get("ts") or 0), reserved=usd, model=str(line.get("model") or ""),
                session=str(line.get("session") or ""), pid=str(line.get("pid") or ""), owner=str(line.get("owner") or ""),
                base=_number(line.get("base")),
            )  # fmt: skip
        elif line.get("kind") == "settle" and ident in entries:
            steps = line.get("steps")
            entries[ident] = Entry(
                **{**entries[ident].__dict__, "spent": usd, "steps": int(steps) if isinstance(steps, int) else None,
                   "outcome": str(line.get("outcome") or "")}
            )  # fmt: skip
    return entries


def _number(value: object) -> float:
    try:
        found = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return 0.0
    return found if 0 <= found < float("inf") else 0.0


def _recorded_spend(session: Path) -> float | None:
    """What a session's run recorded it spent (its state.json), or None."""
    try:
        state = json.loads((session / "state.json").read_text(encoding="utf-8"))
        value = float(state["spent"]["cost_usd"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return value if 0 <= value < float("inf") else None


def _day(ts: float) -> str:
    return datetime.fromtimestamp(ts).strftime("%Y-%m-%d")


def _month(ts: float) -> str:
    return datetime.fromtimestamp(ts).strftime("%Y-%m")
