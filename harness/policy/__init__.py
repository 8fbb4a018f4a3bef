"""Policy: pure decisions about a tool call, made before anything runs.

`gate` (ordered rules, default deny: a Decision with the rule that made it), `argv` (the parsed argv a
command rule reads), `approve` (who answers an `ask`: a person at the terminal, or an answer file in
the session folder, else deny after the timeout). It imports neither the tools, the providers nor
the sandbox.
"""
