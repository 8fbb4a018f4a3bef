"""The agent: the loop and everything it decides with, for one session.

`loop` (the short loop, the only place that branches on outcomes), `recovery` (picking up a crashed
turn), `outcome` (how a run ends and the state a resume starts from), `budget` and `deadline` (every
cost metered, the wall clock each call gets), `context` (the prompt budget and its three tiers),
`prompt` (the system prompt and the task message), `repetition` (loops caught), `verify` (what
"done" means) with `protect` (the protected set) and `guard` (read-only paths put back), `detect`
(the repository's own test and setup commands), `trajectory` (the write-ahead record), `steps` (the
one step numbering), `reissue` (`harness replay`), and `seams` (the protocols the loop is written
against). It imports the tools, the providers and the policy below it; nothing here builds them:
the composition root (`harness.assembly`) does.
"""
