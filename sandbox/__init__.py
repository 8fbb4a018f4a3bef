"""The sandbox: run a command in a disposable, hardened container that sees one workspace.

The contract sits at the top of the package and every backend meets it: `spec` (what a call may
use, the `Sandbox` protocol), `envelope` (what a call did, exit code first), `errors` (when it could
not run at all), `output` (head+tail capped capture), `fake` (a host-process backend that passes the
same contract tests), `labels` and `layout` (the names of labels and of a session folder's files),
`owner` (who owns a workspace), `exit_code` (the one table of exit codes), `settings` (the session
settings every config embeds), and the shared primitives `durable` (crash-safe files: atomic
documents, an append-only log) and `tree` (copying and removing folders). Below it: `docker/` (the
container engine), `snapshot/` (the git-format snapshot store), `session/` (sessions on top of both)
and `warm/` (the resident warm service, on top of sessions). `sandbox` never imports `harness`.
"""
