"""One exception tree for the host side. Foreign errors (SDK, HTTP) are translated where they occur
(providers/, sandbox/docker.py); stop signals carry what the transcript should record."""

from __future__ import annotations

from typing import Any


class HarnessError(Exception):
    """Base of every harness error. The message is one line that says what to do."""


class ConfigError(HarnessError, ValueError):
    """A config file, flag or script is invalid."""


class ScriptError(ConfigError):
    """A scripted-model file is malformed; the message names the offending line."""


class SessionError(HarnessError, RuntimeError):
    """A session cannot be opened, resumed or changed as asked."""


# --- model side -------------------------------------------------------------------------------


class ModelError(HarnessError, RuntimeError):
    """The model call failed and will not be retried further."""

    retryable = False
    usage: Any = None
    """`harness.types.Usage` the failed call(s) still consumed (billed by the meter), or None."""
    cost_usd: float = 0.0
    """Cost of that usage, set by the retry layer."""


class ModelAuthError(ModelError, PermissionError):
    """The API key was rejected (never retried)."""


class ModelContextLengthError(ModelError):
    """The request exceeded the model's context window (never retried)."""


class ModelSpendLimitError(ModelError):
    """The account's spend or quota limit is reached (a 429 that is never retried)."""


class ModelRateLimited(ModelError):
    """A 429 that may be retried after `retry_after` seconds."""

    retryable = True

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class ModelUnavailable(ModelError, ConnectionError):
    """Timeout, connection failure, stalled stream, 5xx or overloaded: retryable."""

    retryable = True

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class ModelBadResponse(ModelError):
    """The server answered with something that is not a valid response (not retried)."""


class RetryBudgetExhausted(ModelError):
    """The per-call or per-session retry budget ran out; carries the last underlying error."""

    def __init__(self, message: str, last_error: BaseException | None = None) -> None:
        super().__init__(message)
        self.last_error = last_error


# --- tools and gate ---------------------------------------------------------------------------


class ToolError(HarnessError):
    """A tool call that cannot be executed; `kind` is one of the model-visible error kinds."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


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
