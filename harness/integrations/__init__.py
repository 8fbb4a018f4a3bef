"""harness as the execution backend of tools people already use (optional extras, imported lazily).

- `box`: one harness session as a plain backend (exec, read_file, write_file), shared by both.
- `inspect_sandbox`: an Inspect AI `SandboxEnvironment` named `harness` (`pip install 'harness[inspect]'`).
- `minisweagent`: a mini-swe-agent environment, `harness.integrations.minisweagent.HarnessEnvironment`.
"""
