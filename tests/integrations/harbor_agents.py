"""Agents for the Harbor tests, loaded by Harbor by import path (`-a tests.integrations.harbor_agents:Hostile`)
inside its own Python 3.12+ environment; harness never imports this module."""

from __future__ import annotations

from harbor.agents.base import BaseAgent

TRIES = {
    "network": "python3 -c \"import socket; socket.create_connection(('192.0.2.1', 80), timeout=3)\"",
    "name": "python3 -c \"import socket; socket.getaddrinfo('example.invalid', 443)\"",
    "passwd": "echo 'x::0:0::/:/bin/sh' >> /etc/passwd",
    "root_home": "echo pwned > /root/pwned",
    "whoami": "id -u",
}


class Hostile(BaseAgent):
    """Tries to reach the network and to write outside the workspace; reports each outcome."""

    @staticmethod
    def name() -> str:
        return "hostile"

    def version(self) -> str:
        return "1"

    async def setup(self, environment) -> None:
        pass

    async def run(self, instruction, environment, context) -> None:
        lines = []
        for what, command in TRIES.items():
            result = await environment.exec(command, user="root", timeout_sec=30)
            output = ((result.stdout or "") + (result.stderr or "")).strip().splitlines()
            lines.append(f"{what}: exit {result.return_code}: {output[-1] if output else ''}")
        await environment.exec("cat > /logs/agent/hostile.log <<'EOF'\n" + "\n".join(lines) + "\nEOF")
        trajectory = {  # what it did, as ATIF (Harbor collects /logs/agent; harness's report links it)
            "schema_version": "ATIF-v1.7",
            "session_id": "hostile",
            "agent": {"name": "hostile", "version": "1"},
            "steps": [{"step_id": 1, "source": "user", "message": instruction}]
            + [
                {
                    "step_id": n + 2,
                    "source": "agent",
                    "message": f"try {what}",
                    "tool_calls": [
                        {"tool_call_id": what, "function_name": "exec", "arguments": {"command": TRIES[what]}}
                    ],
                    "observation": {"results": [{"source_call_id": what, "content": line}]},
                }
                for n, (what, line) in enumerate(zip(TRIES, lines, strict=True))
            ],
        }
        import json

        await environment.exec("cat > /logs/agent/trajectory.json <<'EOF'\n" + json.dumps(trajectory) + "\nEOF")


class Sleeper(BaseAgent):
    """Runs one long command (the test kills Harbor meanwhile)."""

    @staticmethod
    def name() -> str:
        return "sleeper"

    def version(self) -> str:
        return "1"

    async def setup(self, environment) -> None:
        pass

    async def run(self, instruction, environment, context) -> None:
        await environment.exec("sleep 300", timeout_sec=400)


class Fetcher(BaseAgent):
    """GETs the URL its instruction names and one outside the task's allowlist; reports both."""

    @staticmethod
    def name() -> str:
        return "fetcher"

    def version(self) -> str:
        return "1"

    async def setup(self, environment) -> None:
        pass

    async def run(self, instruction, environment, context) -> None:
        url = instruction.split()[-1]
        lines = []
        for what, target in (("allowed", url), ("other", "http://192.0.2.1/")):
            probe = (  # the container's own loopback is NO_PROXY: the host's 127.0.0.1 is the proxy's to reach
                "import os, urllib.request, sys\n"
                "os.environ.pop('NO_PROXY', None); os.environ.pop('no_proxy', None)\n"
                "try:\n    print(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())\n"
                "except Exception as error:\n    print('refused:', error)\n"
            )
            result = await environment.exec(f"python3 -c {_quote(probe)} {_quote(target)}", timeout_sec=60)
            lines.append(f"{what}: {(result.stdout or '').strip()}")
        await environment.exec("cat > /logs/agent/fetch.log <<'EOF'\n" + "\n".join(lines) + "\nEOF")


def _quote(text: str) -> str:
    import shlex

    return shlex.quote(text)
