"""The one table of exit codes: every code a harness command ends with, each with one meaning.

It sits at the bottom of the import graph (the sandbox never imports harness, and both need it):
the error classes of `sandbox.errors` and `harness.errors` carry these members as their `exit_code`,
the run outcomes map to them (`harness.agent.outcome`), `harness tool` answers an error kind with one of
them, and the documented table (docs/cli.md) is checked against this enum by a test. `harness exec`
is the one command that otherwise exits with the command's own code.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """Exit codes of harness itself; no number has two meanings."""

    OK = 0
    """`run`/`resume`: outcome verified (other commands: success)."""
    FAILED = 1
    """`harness tool`: the tool's command failed to execute (error kind `execution_error`)."""
    UNVERIFIED = 10
    """Run outcome `unverified`: the model finished but no verify command was configured."""
    FAILED_VERIFICATION = 11
    """Run outcome `failed_verification`: the verify command still failed after the allowed rounds
    (`tasks check`: no task is sound)."""
    STUCK = 12
    """Run outcome `stuck`: the circuit breaker tripped (same tool failing, same tests failing)."""
    LIMIT = 13
    """Run outcome `limit:<which>`: a step, token, cost, wall-clock or context budget was spent."""
    MODEL_ERROR = 14
    """Run outcome `model_error`: the model call failed past the retry policy (run is resumable)."""
    DIVERGED = 15
    """`harness replay`: a re-issued call did not give what was recorded."""
    TOOL_INVALID = 20
    """`harness tool`: the call itself is invalid (bad JSON, invalid arguments, unknown tool)."""
    TOOL_DENIED = 21
    """`harness tool`: the permission gate denied the call."""
    USAGE = 64
    """Bad flag, argument or limit, or a step out of range."""
    PATCH_CONFLICT = 65
    """What harness recorded no longer matches what is on disk: the exported patch no longer applies
    to the original repository (it changed since import), or a stored snapshot object was altered (its
    content no longer has its hash)."""
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
    TOOL_OUTPUT_LIMIT = 73
    """`harness tool`: the tool's output passed its cap (error kind `output_limit`)."""
    STORAGE = 74
    """Run outcome `state_error`, or any command: a write under the state directory failed (disk
    full, over quota, read-only, I/O error); committed steps stay resumable."""
    SETUP_FAILED = 75
    """The session's environment could not be made: a setup command (`--setup`, `auto`), a service or
    a devcontainer build failed; the message names the command, its output and the log that stays."""
    MODEL_AUTH = 77
    """The model endpoint rejected the API key (or the account's spend limit is reached)."""
    CONFIG = 78
    """Invalid config file or script."""
    TOOL_TIMEOUT = 124
    """`harness tool`: the tool's call ran out of time (error kind `timeout`)."""
    SANDBOX = 125
    """The sandbox could not run the command: no Docker engine answers, or the engine failed (run
    outcome `sandbox_error`)."""
    INTERRUPTED = 130
    """Ctrl-C or SIGTERM; a run stopped this way is resumable."""
