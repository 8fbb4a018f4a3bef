"""The agents people already use, hosted: each one's npm packages at pinned versions, the command that
speaks ACP on its stdio, how it reaches its model (harness's gateway) and harness's tools (MCP), and
the image it runs in: its packages over the session's own image.

An agent's image is built from what this machine's npm fetches (`npm install --ignore-scripts`: no
package's install script runs here), a Node.js when the agent needs one (this machine's own
executable when it is a self-contained build of the major the agent needs, else the image's or
Debian's), and the files that hold the agent to harness's terms (Claude Code's managed settings:
bypassing permissions refused, its own shell denied). It is cached by what goes into it: the session
image, the packages and versions, the Node.js, those files.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from harness.errors import ConfigError, UsageError

AGENT_ROOT = "/opt/harness-agent"
"""Where an agent image holds the agent's packages (node_modules) and its Node.js (bin/node)."""
AGENT_HOME = "/home/agent"
"""The agent's home in its container: a folder of the session's, so its own session files outlive a crash."""
GATEWAY_DIR = "/run/harness-agent"
"""Where the agent's container sees the gateway's socket folder (read-only)."""
GATEWAY_PORT = 8788
"""The port of 127.0.0.1 inside the agent's container that reaches the gateway (its only way out)."""
PLACEHOLDER_KEY = "harness-gateway-holds-the-key"
"""What the agent's key variable holds: the gateway puts the real key in; no container ever sees it."""


OWN_SHELL_ISOLATION = (
    "its own container (no network, not root, a read-only root, no key; its model through harness's gateway); "
    "its own shell runs each command in that container (not a fresh one per call), each asked of harness's gate "
    "first and recorded as a step with its snapshot; each of its edits asked of harness's gate first"
)


@dataclass(frozen=True)
class OwnShell:
    """How an agent keeps its own shell (`--agent-shell own`): its commands run in its own container
    (confined as it is), each asked of harness's gate first and recorded as a step with its snapshot,
    instead of harness's `run_command` in a fresh container per call (docs/agents.md)."""

    files: dict[str, str] = field(default_factory=dict)
    """Files mounted read-only over its image's (settings that let its shell on)."""
    environment: dict[str, str] = field(default_factory=dict)
    """Variables over its own."""
    command: tuple[str, ...] | None = None
    """Its command, when another."""
    session_meta: dict[str, object] | None = None
    """Its `session/new` `_meta`, when another."""


@dataclass(frozen=True)
class HostedAgent:
    """One agent harness can host (docs/agents.md)."""

    name: str
    packages: tuple[tuple[str, str], ...]
    """The npm packages (name, pinned version) its image holds."""
    command: tuple[str, ...]
    """Its ACP agent on stdio, as run in its container."""
    protocol: Literal["anthropic", "openai-responses", "openai", "gemini"]
    """The model protocol it speaks (what the gateway forwards and reads the usage of)."""
    model_prefix: str
    """harness's provider prefix of that protocol (`--model` is PREFIX:MODEL; the price table's vendor)."""
    base_url_env: str | None
    """The variable that points it at its model endpoint (the gateway's); None: its command does."""
    key_env: str
    """The variable it reads its key from (it gets PLACEHOLDER_KEY)."""
    node: int | None = None
    """The Node.js major it needs (None: none)."""
    environment: dict[str, str] = field(default_factory=dict)
    """Variables of its process (telemetry and updates off, its model): `{model_json}` in a value is the
    MODEL escaped for a JSON string."""
    files: dict[str, str] = field(default_factory=dict)
    """Files of its image (absolute path: content), written as root and readable by all."""
    session_meta: dict[str, object] = field(default_factory=dict)
    """The `_meta` of its `session/new` (Claude Code's options: its built-in tools)."""
    model_env: str | None = None
    """The variable that names its model (`--model`'s MODEL), if it reads one."""
    model_args: tuple[str, ...] = ()
    """Arguments added to its command when `--model` names a MODEL: `{model}` in them is the MODEL,
    `{model_toml}` the MODEL as a TOML string (quoted and escaped)."""
    mcp_tools: tuple[str, ...] = ("run_command", "run_tests")
    """harness's tools its MCP server offers it (its own tools do the rest)."""
    isolation: str = ""
    """What isolation it gets, in a line (`show`, the report, docs/agents.md)."""
    own_shell: OwnShell | None = None
    """What differs when it keeps its own shell (`--agent-shell own`): None, it cannot."""
    mounted: dict[str, str] = field(default_factory=dict)
    """Files mounted read-only over its image's when it runs (its own shell's settings)."""

    def variables(self, model: str | None) -> dict[str, str]:
        """Its process's variables, with the model put in where they name it."""
        escaped = json.dumps(model or "")[1:-1]
        return {name: value.replace("{model_json}", escaped) for name, value in self.environment.items()}

    def argv(self, model: str | None) -> list[str]:
        """Its command, with the model's arguments when one is named."""
        if not model:
            return list(self.command)
        quoted = json.dumps(model)
        return [
            *self.command,
            *(part.replace("{model_toml}", quoted).replace("{model}", model) for part in self.model_args),
        ]

    def with_shell(self, shell: Literal["harness", "own"]) -> HostedAgent:
        """This agent as `--agent-shell` has it: harness's (every command a `run_command`), or its own
        (the files mounted over its image's named in `mounted`); UsageError when it cannot keep its own."""
        if shell == "harness":
            return self
        if self.own_shell is None:
            raise UsageError(f"--agent-shell own: {self.name} has no shell of its own harness can keep")
        own = self.own_shell
        return replace(
            self,
            environment={**self.environment, **own.environment},
            command=own.command or self.command,
            session_meta=self.session_meta if own.session_meta is None else own.session_meta,
            isolation=OWN_SHELL_ISOLATION,
            own_shell=None,
            mounted=own.files,
        )

    @property
    def image_name(self) -> str:
        return f"agent-{self.name}"


CLAUDE_TOOLS = ["Read", "Edit", "Write", "Glob", "Grep", "NotebookEdit", "TodoWrite"]
"""Claude Code's own tools a hosted Claude Code keeps (every command is harness's)."""
CLAUDE_MANAGED = {
    "permissions": {
        "disableBypassPermissionsMode": "disable",
        "defaultMode": "default",
        "deny": ["Bash", "BashOutput", "KillShell", "WebFetch", "WebSearch"],
        "allow": ["mcp__harness"],
    },
}
"""Claude Code's managed settings in its image: over any settings file of the repository's, every
edit asks harness (no bypass) and its shell and web tools stay off; harness's own tools need not ask
(the loop gates each when it runs it)."""
CLAUDE_OWN_SHELL = OwnShell(
    files={
        "/etc/claude-code/managed-settings.json": json.dumps(
            {"permissions": {**CLAUDE_MANAGED["permissions"], "deny": ["WebFetch", "WebSearch"]}}, indent=1
        )
    },
    session_meta={"claudeCode": {"options": {"tools": [*CLAUDE_TOOLS, "Bash", "BashOutput", "KillShell"]}}},
)
"""Claude Code with its own Bash (each command asks harness first: no bypass, no allow rule)."""


def _codex_config(shell: bool) -> tuple[str, ...]:
    return tuple(
        part
        for setting in (
            'model_provider="harness"',
            f'model_providers.harness={{name="harness", base_url="http://127.0.0.1:{GATEWAY_PORT}/model", '
            'env_key="OPENAI_API_KEY", wire_api="responses"}',
            f"features.shell_tool={'true' if shell else 'false'}",
            "features.unified_exec=false",
            "features.js_repl=false",
            "features.responses_websockets=false",
            "features.responses_websockets_v2=false",
            "features.remote_models=false",
            'web_search="disabled"',
            'approval_policy="untrusted"',
            'sandbox_mode="danger-full-access"',
            "check_for_update_on_startup=false",
            "analytics.enabled=false",
        )
        for part in ("-c", setting)
    )


CODEX_CONFIG = _codex_config(shell=False)
CODEX_COMMAND = f"{AGENT_ROOT}/node_modules/@zed-industries/codex-acp-linux-x64/bin/codex-acp"
"""Codex's settings on its command line, over any config file of the repository's: its model the
gateway's (a provider of its own, the key variable a placeholder), its shell and web search off
(every command is harness's `run_command`; with no shell it reads through harness's tools), every
edit of its own asking harness first (`untrusted`), its own sandbox off (it needs bubblewrap; its
container is the sandbox), nothing phoned home."""

OPENCODE_CONFIG: dict[str, Any] = {
    "model": "anthropic/{model_json}",
    "provider": {
        "anthropic": {
            "options": {"baseURL": f"http://127.0.0.1:{GATEWAY_PORT}/model/v1"},
            "models": {"{model_json}": {"name": "{model_json}", "tool_call": True}},
        }
    },
    "permission": {"edit": "ask", "bash": "deny", "webfetch": "deny", "external_directory": "deny"},
    "tools": {"bash": False, "webfetch": False, "websearch": False},
    "autoupdate": False,
    "share": "disabled",
    "lsp": False,
    "formatter": False,
}
"""opencode's config as its process's OPENCODE_CONFIG_CONTENT (a repository's opencode.json is not read:
OPENCODE_DISABLE_PROJECT_CONFIG): its model the gateway's, its shell and web tools off, each edit
asking harness, nothing phoned home."""

GEMINI_SETTINGS = {
    "tools": {"exclude": ["run_shell_command", "web_fetch", "google_web_search"]},
    "security": {"auth": {"selectedType": "gateway", "enforcedType": "gateway"}, "folderTrust": {"enabled": False}},
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
    "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
}
"""Gemini CLI's system settings in its image (they override a repository's `.gemini/settings.json`):
its shell and web tools off, its model the gateway's, nothing phoned home."""
GEMINI_SETTINGS_PATH = "/etc/gemini-cli/settings.json"

AGENTS: dict[str, HostedAgent] = {
    "claude-code": HostedAgent(
        name="claude-code",
        packages=(("@zed-industries/claude-agent-acp", "0.23.1"), ("@anthropic-ai/claude-code", "2.1.332")),
        command=("node", f"{AGENT_ROOT}/node_modules/@zed-industries/claude-agent-acp/dist/index.js"),
        protocol="anthropic",
        model_prefix="anthropic",
        base_url_env="ANTHROPIC_BASE_URL",
        key_env="ANTHROPIC_API_KEY",
        node=18,
        environment={
            "CLAUDE_CODE_EXECUTABLE": f"{AGENT_ROOT}/node_modules/@anthropic-ai/claude-code-linux-x64/claude",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_ERROR_REPORTING": "1",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "CLAUDE_CODE_DISABLE_TERMINAL_TITLE": "1",
        },
        files={"/etc/claude-code/managed-settings.json": json.dumps(CLAUDE_MANAGED, indent=1)},
        session_meta={"claudeCode": {"options": {"tools": CLAUDE_TOOLS, "disallowedTools": ["Bash"]}}},
        own_shell=CLAUDE_OWN_SHELL,
        model_env="ANTHROPIC_MODEL",
        isolation=(
            "its own container (no network, not root, a read-only root, no key; its model through harness's "
            "gateway); its shell and web tools off: every command harness's run_command in a fresh container; "
            "each of its edits asked of harness's gate first"
        ),
    ),
    "codex": HostedAgent(
        name="codex",
        packages=(("@zed-industries/codex-acp", "0.16.0"),),
        command=(CODEX_COMMAND, *CODEX_CONFIG),
        own_shell=OwnShell(command=(CODEX_COMMAND, *_codex_config(shell=True))),
        protocol="openai-responses",
        model_prefix="openai-responses",
        base_url_env=None,
        key_env="OPENAI_API_KEY",
        environment={"CODEX_HOME": AGENT_HOME, "RUST_LOG": "error"},
        model_args=("-c", "model={model_toml}"),
        mcp_tools=("run_command", "run_tests", "read_file", "list_dir", "search_code"),
        isolation=(
            "its own container (no network, not root, a read-only root, no key; its model through harness's "
            "gateway); its shell off: every command harness's run_command in a fresh container, its reads "
            "harness's tools; each apply_patch asked of harness's gate first"
        ),
    ),
    "gemini": HostedAgent(
        name="gemini",
        packages=(("@google/gemini-cli", "0.61.0"),),
        command=("node", f"{AGENT_ROOT}/node_modules/@google/gemini-cli/bundle/gemini.js", "--acp"),
        protocol="gemini",
        model_prefix="gemini",
        base_url_env="GOOGLE_GEMINI_BASE_URL",
        key_env="GEMINI_API_KEY",
        node=20,
        environment={
            "GEMINI_CLI_SYSTEM_SETTINGS_PATH": GEMINI_SETTINGS_PATH,
            "GEMINI_CLI_NO_RELAUNCH": "true",
            "GEMINI_TELEMETRY_ENABLED": "false",
            "NO_BROWSER": "true",
        },
        files={GEMINI_SETTINGS_PATH: json.dumps(GEMINI_SETTINGS, indent=1)},
        own_shell=OwnShell(
            files={
                GEMINI_SETTINGS_PATH: json.dumps(
                    {**GEMINI_SETTINGS, "tools": {"exclude": ["web_fetch", "google_web_search"]}}, indent=1
                )
            }
        ),
        model_env="GEMINI_MODEL",
        isolation=(
            "its own container (no network, not root, a read-only root, no key; its model through harness's "
            "gateway); its shell and web tools off: every command harness's run_command in a fresh container; "
            "each of its edits asked of harness's gate first"
        ),
    ),
    "opencode": HostedAgent(
        name="opencode",
        packages=(("opencode-ai", "1.18.33"),),
        command=(f"{AGENT_ROOT}/node_modules/opencode-linux-x64/bin/opencode", "acp"),
        protocol="anthropic",
        model_prefix="anthropic",
        base_url_env=None,
        key_env="ANTHROPIC_API_KEY",
        environment={
            "OPENCODE_CONFIG_CONTENT": json.dumps(OPENCODE_CONFIG),
            "OPENCODE_DISABLE_PROJECT_CONFIG": "true",
            "OPENCODE_DISABLE_MODELS_FETCH": "true",
            "OPENCODE_DISABLE_AUTOUPDATE": "true",
            "OPENCODE_DISABLE_SHARE": "true",
            "OPENCODE_DISABLE_LSP_DOWNLOAD": "true",
            "OPENCODE_DISABLE_DEFAULT_PLUGINS": "true",
            "OPENCODE_DISABLE_CLAUDE_CODE": "true",
            "OPENCODE_DISABLE_EXTERNAL_SKILLS": "true",
        },
        own_shell=OwnShell(
            environment={
                "OPENCODE_CONFIG_CONTENT": json.dumps(
                    {
                        **OPENCODE_CONFIG,
                        "permission": {**OPENCODE_CONFIG["permission"], "bash": "ask"},
                        "tools": {"bash": True, "webfetch": False, "websearch": False},
                    }
                )
            }
        ),
        isolation=(
            "its own container (no network, not root, a read-only root, no key; its model through harness's "
            "gateway); its shell and web tools off: every command harness's run_command in a fresh container; "
            "each of its edits asked of harness's gate first"
        ),
    ),
}
"""The agents `--agent` names."""


def agent_named(name: str, what: str = "--agent") -> HostedAgent:
    """The agent `--agent NAME` names; UsageError listing them otherwise."""
    found = AGENTS.get(name)
    if found is None:
        raise UsageError(f"{what} {name!r}: not an agent harness hosts (it hosts {', '.join(sorted(AGENTS))})")
    return found


PROTOCOL_NAMES = {
    "anthropic": "Anthropic's Messages API",
    "openai-responses": "OpenAI's Responses API",
    "openai": "OpenAI's chat completions",
    "gemini": "Gemini's API",
}


def agent_for(name: str, model: str | None, what: str = "--agent") -> HostedAgent:
    """The agent `name` if it can be given `model` (a model of the protocol it speaks, reached over
    HTTP); UsageError saying what it needs otherwise."""
    from harness.providers.vendor import ModelSpec

    agent = agent_named(name, what)
    spec = ModelSpec.of(model)
    if spec.prefix != agent.model_prefix or not spec.target:
        raise UsageError(
            f"{what} {name} speaks {PROTOCOL_NAMES[agent.protocol]}: give it a model as "
            f"{agent.model_prefix}:MODEL (or {name}@{agent.model_prefix}:MODEL in a batch), not {model or 'none'}"
        )
    return agent


def image_key(agent: HostedAgent) -> str:
    """What an agent's image is cached by, known without fetching anything: its packages and versions,
    its files, its command, and the Node.js it gets (this machine's, by content, or the image's)."""
    node = host_node(agent.node) if agent.node is not None else None
    digest = hashlib.sha256(json.dumps([agent.packages, agent.files, agent.command, agent.node]).encode())
    digest.update(hashlib.sha256(node.read_bytes()).digest() if node is not None else b"the image's node")
    return digest.hexdigest()


def build_context(agent: HostedAgent, into: Path, *, npm: str | None = None) -> Path:
    """Fill into with an agent image's build context: the agent's packages fetched by npm (no install
    script run), its Node.js when it needs one, its files, the Dockerfile over `ARG BASE`; into.
    ConfigError saying what is missing (npm) or what npm said."""
    into.mkdir(parents=True, exist_ok=True)
    _fetch_packages(agent, into, npm or shutil.which("npm"))
    node = host_node(agent.node) if agent.node is not None else None
    lines = ["ARG BASE", "FROM ${BASE}", "USER root", f"COPY node_modules {AGENT_ROOT}/node_modules"]
    if node is not None:
        shutil.copy2(node, into / "node")
        lines.append(f"COPY node {AGENT_ROOT}/bin/node")
    elif agent.node is not None:  # the image's own, else Debian's (bookworm: 18)
        lines.append(
            "RUN command -v node >/dev/null 2>&1 || (apt-get update && apt-get install -y --no-install-recommends "
            "nodejs && rm -rf /var/lib/apt/lists/*)"
        )
    for n, (path, content) in enumerate(sorted(agent.files.items())):
        (into / f"file{n}").write_text(content)
        lines.append(f"COPY file{n} {path}")
    folders = " ".join(sorted({str(Path(p).parent) for p in agent.files}))
    lines.append(f"RUN mkdir -p {AGENT_ROOT}/bin && chmod -R a+rX {AGENT_ROOT} {folders}".rstrip())
    lines += [f"ENV PATH={AGENT_ROOT}/bin:$PATH", "USER 10001:10001"]
    (into / "Dockerfile").write_text("\n".join(lines) + "\n")
    return into


def _fetch_packages(agent: HostedAgent, into: Path, npm: str | None) -> None:
    if npm is None:
        raise ConfigError(
            f"hosting {agent.name} needs npm on this machine to fetch {', '.join(n for n, _ in agent.packages)} "
            "(no package's install script is run): install Node.js and npm"
        )
    (into / "package.json").write_text(json.dumps({"name": "harness-agent", "private": True}))
    argv = [npm, "install", "--ignore-scripts", "--no-audit", "--no-fund", "--omit=dev", "--prefix", str(into)]
    argv += [f"{name}@{version}" for name, version in agent.packages]
    environment = {k: v for k, v in os.environ.items() if not k.lower().startswith("npm_config_script")}
    done = subprocess.run(argv, capture_output=True, text=True, env=environment, check=False, timeout=900)
    if done.returncode != 0:
        said = [line for line in done.stderr.splitlines() if "ERR" in line][-3:] or done.stderr.splitlines()[-3:]
        raise ConfigError(f"npm could not fetch {agent.name}'s packages: {' | '.join(said)[:600]}")


def host_node(major: int) -> Path | None:
    """This machine's Node.js executable when it is a self-contained build (no libnode) of at least
    `major`: it then runs in any image of a glibc as recent as the one it was built for. None
    otherwise (the image's own, or Debian's, is used)."""
    found = shutil.which("node")
    if found is None:
        return None
    path = Path(found).resolve()
    try:
        version = subprocess.run([str(path), "--version"], capture_output=True, text=True, timeout=10).stdout
        linked = subprocess.run(["ldd", str(path)], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    matched = re.match(r"v(\d+)\.", version.strip())
    if matched is None or int(matched.group(1)) < major or "libnode" in linked or "libuv" in linked:
        return None
    return path
