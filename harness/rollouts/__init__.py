"""harness as an environment that trainers drive: `harness env serve` (`server`), episodes of a task
over OpenEnv's protocol, each episode a served session (each step one tool call in a fresh container,
gated, recorded and snapshotted; the reward from verification), afterwards a session like any other.
Above the batches (a tasks file's entries are its tasks) and the composition root (the served loop)."""
