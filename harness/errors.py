"""One exception tree for the host side.

Foreign errors (SDK, HTTP) are translated where they occur (providers/stream.py,
sandbox/docker/engine.py); stop signals carry what the transcript should record. Every class carries
the exit code the CLI ends with (`exit_code`), so the hierarchy is the classification: the CLI asks
the error, never a parallel table. The codes are the members of `sandbox.exit_code.ExitCode`, the
one table (re-exported here), which `sandbox.errors` classes carry too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, TypeVar, cast

from sandbox.exit_code import ExitCode

if TYPE_CHECKING:
    from harness.types import LimitKind, Outcome, Usage
    from sandbox.envelope import Envelope


class HarnessError(Exception):
    """Base of every harness error. The message is one line that says what to do."""

    exit_code: ClassVar[int] = ExitCode.INTERNAL


class UsageError(HarnessError, ValueError):
    """A flag or argument is missing, malformed or out of range."""

    exit_code: ClassVar[int] = ExitCode.USAGE


class NotFoundError(HarnessError, LookupError):
    """A repository path, session or file that was named does not exist."""

    exit_code: ClassVar[int] = ExitCode.NOT_FOUND


class ConfigError(HarnessError, ValueError):
    """A config file, flag or script is invalid."""

    exit_code: ClassVar[int] = ExitCode.CONFIG


class FlagError(UsageError, ConfigError):
    """A flag's value the config cannot take: a usage error (64), named as the flag; a ConfigError
    still for callers that catch those."""


class ScriptError(ConfigError):
    """A scripted-model file is malformed; the message names the offending line."""


class DamagedError(HarnessError, RuntimeError):
    """A session's stored data is missing or corrupt (a snapshot object): nothing was made from it."""

    exit_code: ClassVar[int] = ExitCode.PATCH_CONFLICT


class SessionError(HarnessError, RuntimeError):
    """A session cannot be opened, resumed or changed as asked."""

    exit_code: ClassVar[int] = ExitCode.NOT_FOUND


class StateError(SessionError):
    """A session's run is in a state that does not allow what was asked (e.g. resume a finished run)."""

    exit_code: ClassVar[int] = ExitCode.USAGE


# --- model side -------------------------------------------------------------------------------


_M = TypeVar("_M", bound="ModelError")


class ModelError(HarnessError, RuntimeError):
    """The model call failed and will not be retried further.

    `usage` is what the failed call(s) still consumed (billed by the meter), `cost_usd` its price
    (set by the retry layer). A layer that knows more usage raises `error.with_usage(...)`, a new
    error of the same class, instead of changing the one it caught."""

    exit_code: ClassVar[int] = ExitCode.MODEL_UNAVAILABLE
    retryable: ClassVar[bool] = False

    def __init__(self, message: str, *, usage: Usage | None = None, cost_usd: float = 0.0) -> None:
        super().__init__(message)
        self.usage = usage
        self.cost_usd = cost_usd

    def with_usage(self: _M, usage: Usage | None, cost_usd: float | None = None) -> _M:
        """The same error carrying usage (and its cost); the original is left as it was."""
        # A fresh instance through the ordinary constructor (every ModelError takes its message
        # first), not copy.copy: libraries that install their own exception pickling (distributed
        # installs tblib's) break copying errors that have two builtin bases.
        made = type(self)(*self.args[:1])
        made.__dict__.update(self.__dict__)
        made.usage = usage
        made.cost_usd = self.cost_usd if cost_usd is None else cost_usd
        made.__traceback__ = None
        return made


class ModelAuthError(ModelError, PermissionError):
    """The API key was rejected (never retried)."""

    exit_code: ClassVar[int] = ExitCode.MODEL_AUTH


class ModelContextLengthError(ModelError):
    """The request exceeded the model's context window (never retried)."""


class ModelSpendLimitError(ModelError):
    """The account's spend or quota limit is reached (a 429 that is never retried)."""

    exit_code: ClassVar[int] = ExitCode.MODEL_AUTH


class ModelRateLimited(ModelError):
    """A 429 that may be retried after `retry_after` seconds."""

    retryable: ClassVar[bool] = True

    def __init__(self, message: str, retry_after: float | None = None, *, usage: Usage | None = None) -> None:
        super().__init__(message, usage=usage)
        self.retry_after = retry_after


class ModelUnavailable(ModelError, ConnectionError):
    """Timeout, connection failure, stalled stream, 5xx or overloaded: retryable."""

    retryable: ClassVar[bool] = True

    def __init__(self, message: str, retry_after: float | None = None, *, usage: Usage | None = None) -> None:
        super().__init__(message, usage=usage)
        self.retry_after = retry_after


class ModelUnreachable(ModelUnavailable):
    """The endpoint cannot be reached at all (connection refused, no such host): the machine's
    network or the server is down, not the model (a batch tries the run again)."""

    nothing_listens = False
    """A port on this machine refused the connection: no server runs there (until the endpoint
    has answered once, nothing is retried: a wrong port or a server not started is said at once)."""


class ModelBadResponse(ModelError):
    """The server answered with something that is not a valid response (not retried)."""


class ModelParameterRejected(ModelError):
    """The server refused one request parameter by name (`param`), e.g. `max_tokens` on a reasoning
    model: never retried as it is, though a provider may resend once without that parameter."""

    def __init__(self, message: str, param: str = "", *, usage: Usage | None = None) -> None:
        super().__init__(message, usage=usage)
        self.param = param


class ModelServerUnsupported(ModelError):
    """The server cannot do what harness needs (tool calls, streaming) as it is configured: never
    retried; the message says the one change that fixes it."""

    exit_code: ClassVar[int] = ExitCode.CONFIG


class RetryBudgetExhausted(ModelError):
    """The per-call or per-session retry budget ran out; carries the last underlying error."""

    def __init__(self, message: str, last_error: BaseException | None = None, *, usage: Usage | None = None) -> None:
        super().__init__(message, usage=usage)
        self.last_error = last_error


# --- tools and gate ---------------------------------------------------------------------------


class ToolError(HarnessError):
    """A tool call that cannot be executed; `kind` is one of the model-visible error kinds, and
    `envelope` what the sandbox reported when a command ran (None when none did)."""

    def __init__(self, kind: str, message: str, envelope: Envelope | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.envelope = envelope


# --- loop stop signals ------------------------------------------------------------------------


class Stop(HarnessError):
    """Ends the run; carries the outcome and the evidence to write to the transcript."""

    def __init__(self, outcome: Outcome, detail: str = "", evidence: Any = None) -> None:
        super().__init__(f"{outcome}: {detail}" if detail else outcome)
        self.outcome = outcome
        self.detail = detail
        self.evidence = evidence


class LimitReached(Stop):
    """A budget limit (steps, tokens, cost, wall clock) was hit."""

    def __init__(self, which: LimitKind, detail: str = "") -> None:
        super().__init__(cast("Outcome", f"limit:{which}"), detail)
        self.which = which
