"""One exception tree for the host side, and the one table of exit codes.

Foreign errors (SDK, HTTP) are translated where they occur (providers/stream.py,
sandbox/docker/engine.py); stop signals carry what the transcript should record. Every class carries
the exit code the CLI ends with (`exit_code`), so the hierarchy is the classification: the CLI asks
the error, never a parallel table. `sandbox.errors` classes carry the same values (tested).
"""

from __future__ import annotations

from enum import IntEnum
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

if TYPE_CHECKING:
    from harness.types import Usage
    from sandbox.envelope import Envelope


class ExitCode(IntEnum):
    """Exit codes of harness itself (`harness exec` otherwise exits with the command's own code)."""

    OK = 0
    """`harness run`/`resume`: outcome verified."""
    UNVERIFIED = 10
    """Run outcome `unverified`: the model finished but no verify command was configured."""
    FAILED_VERIFICATION = 11
    """Run outcome `failed_verification`: the verify command still failed after the allowed rounds."""
    STUCK = 12
    """Run outcome `stuck`: the circuit breaker tripped (same tool failing, same tests failing)."""
    LIMIT = 13
    """Run outcome `limit:<which>`: a step, token, cost, wall-clock or context budget was spent."""
    MODEL_ERROR = 14
    """Run outcome `model_error`: the model call failed past the retry policy (run is resumable)."""
    USAGE = 64
    """Bad flag, argument or limit."""
    PATCH_CONFLICT = 65
    """The exported patch no longer applies to the original repository (it changed since import)."""
    NOT_FOUND = 66
    """Repository path, session, step or file does not exist."""
    MODEL_UNAVAILABLE = 69
    """The model endpoint failed: unreachable, timed out, rate limited past the retry budget, bad answer."""
    INTERNAL = 70
    """An error harness did not classify (a bug: please report it with the message)."""
    IMAGE_MISSING = 71
    """The sandbox image is not present locally (images are never pulled): build or load it."""
    RUNTIME_MISSING = 72
    """The requested container runtime (e.g. runsc) is not registered with the engine."""
    STORAGE = 74
    """Run outcome `state_error`, or any command: a write under the state directory failed (disk
    full, over quota, read-only, I/O error); committed steps stay resumable."""
    MODEL_AUTH = 77
    """The model endpoint rejected the API key (or the account's spend limit is reached)."""
    CONFIG = 78
    """Invalid config file or script."""
    SANDBOX = 125
    """The sandbox could not run the command: no Docker engine answers, or the engine failed."""
    INTERRUPTED = 130
    """Ctrl-C or SIGTERM; a run stopped this way is resumable."""


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


class ScriptError(ConfigError):
    """A scripted-model file is malformed; the message names the offending line."""


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

    def __init__(self, outcome: str, detail: str = "", evidence: Any = None) -> None:
        super().__init__(f"{outcome}: {detail}" if detail else outcome)
        self.outcome = outcome
        self.detail = detail
        self.evidence = evidence


class LimitReached(Stop):
    """A budget limit (steps, tokens, cost, wall clock) was hit."""

    def __init__(self, which: str, detail: str = "") -> None:
        super().__init__(f"limit:{which}", detail)
        self.which = which
