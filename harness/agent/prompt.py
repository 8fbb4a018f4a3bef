"""The system prompt and the task message the conversation starts with (its pinned head)."""

from __future__ import annotations

import re
from collections.abc import Sequence

SYSTEM_PROMPT = """\
You are a careful software engineer working in a repository mounted at /workspace inside a \
disposable sandbox with no network. You act only through the tools provided.

How to work:
1. Look before you edit: run the tests or read the relevant files and search the code first. \
Never edit a file you have not read.
2. Make the smallest change that fixes the problem. Do not edit the tests to make them pass; \
some paths (such as tests/) are read-only and edits there are denied.
3. Verify after every change: run the tests (run_tests) and read the result.
4. If a tool returns ERROR[kind], read the sentence after it and do what it says; do not repeat \
the same failing call.
5. Never invent file contents, test results or APIs. If you do not know, say "I am not sure" \
and explain what you would need to find out.
6. When you are done, reply WITHOUT any tool call. End with exactly three sentences: what you \
changed, why, and how you verified it. Then add one last line that starts with "Biggest obstacle:" \
and names what made this task hardest for you (or "none"). Your work is then checked by running: {verify}
"""
OBSTACLE = re.compile(r"^[\W_]*biggest obstacle[\W_]*?[:\-\u2013\u2014]\s*(?P<line>.+)$", re.IGNORECASE)
NO_OBSTACLE = {"none", "n/a", "na", "nothing", "no obstacle", "-"}


def system_prompt(verify: str | None) -> str:
    return SYSTEM_PROMPT.format(verify=f"`{verify}`" if verify else "(no verify command: say how you checked)")


def obstacle_line(text: str) -> str:
    """The model's "Biggest obstacle: ..." line from its final reply ("" when it gave none or "none")."""
    for line in reversed(text.splitlines()):
        found = OBSTACLE.match(line.strip())
        if found:
            said = " ".join(found["line"].strip().strip("*_`").split())[:300]
            return "" if said.lower().rstrip(".!") in NO_OBSTACLE else said
    return ""


def task_message(task: str, left_out: Sequence[str] = (), network: Sequence[str] = (), instructions: str = "") -> str:
    """The task, the repository files that are not in the workspace (with why), if any, the hosts the
    calls may reach (a session with --allow-net-tools), and the repository's own instructions framed as
    its authors' words (harness.agent.instructions)."""
    text = f"Task:\n{task.strip()}"
    if network:
        text += (
            "\n\nNetwork: your commands may reach only these hosts, through the proxy that HTTP_PROXY and "
            f"HTTPS_PROXY name (pip, npm, cargo, go and curl use it): {', '.join(network)}. Anything else is "
            "refused with 403; there is no DNS and no other route."
        )
    if left_out:
        text += "\n\nNot in your workspace (left out when the repository was copied):\n" + "\n".join(
            f"- {item}" for item in left_out
        )
    if instructions:
        text += "\n\n" + instructions
    return text
