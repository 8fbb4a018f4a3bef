"""Local model servers recognised from what they answer, and what they will really keep.

Ollama answers `GET /api/version`; its OpenAI-compatible endpoint silently truncates a conversation
to the model's `num_ctx` (the server's default, 2k-4k tokens unless OLLAMA_CONTEXT_LENGTH or the
model's parameters say more), whatever the client budgets. llama.cpp's server answers `GET /props`
with the context it was started with (`n_ctx`). llama.cpp's Python server (`llama-cpp-python[server]`)
answers neither, but names itself in its OpenAPI document. Each is asked with a short timeout; a
server that answers none is just "an OpenAI-compatible server".
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel

from harness.providers.config import host_of

OLLAMA_DEFAULT_CONTEXT = 4096
"""What an Ollama server keeps when neither the model nor the server says otherwise (recent releases;
older ones kept 2048)."""
_PROBE_TIMEOUT_S = 3.0


class LocalServer(BaseModel):
    """A local server and the context it will really keep."""

    kind: Literal["ollama", "llama.cpp", "llama-cpp-python"]
    version: str = ""
    context_tokens: int | None = None
    """Tokens of conversation the server keeps for this model; None when it does not say."""
    context_source: str = ""
    """Where that figure comes from (the model's num_ctx, the server's default, n_ctx)."""
    warning: str = ""
    """One line when the server keeps less than harness budgets, with the fix."""


def may_be_local(base_url: str) -> bool:
    """Worth asking whether a local server answers: a loopback or LAN address, a bare host name, or a
    port other than 443 (a hosted vendor behind https is never probed)."""
    host = host_of(base_url)
    if host is None:
        return False
    return host.address is not None or host.name == "localhost" or "." not in host.name or host.port != 443


def server_root(base_url: str) -> str:
    """The server's own root: its OpenAI-compatible base URL without `/v1` (where it answers what it
    is, and counts tokens)."""
    return re.sub(r"/v1/?$", "", base_url.rstrip("/"))


def detect_local_server(base_url: str, model: str, context_budget: int | None = None) -> LocalServer | None:
    """Ollama or llama.cpp behind `base_url` (its /v1 stripped), or None."""
    import httpx2

    root = server_root(base_url)
    try:
        with httpx2.Client(timeout=_PROBE_TIMEOUT_S) as client:
            server = _ollama(client, root, model) or _llama_cpp(client, root) or _llama_cpp_python(client, root)
    except httpx2.HTTPError:
        return None
    if server and context_budget and server.context_tokens and server.context_tokens < context_budget:
        server.warning = _warning(server, context_budget)
    return server


def _json(response: Any) -> dict[str, Any] | None:
    if response.status_code != 200:
        return None
    try:
        body = response.json()
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


def _ollama(client: Any, root: str, model: str) -> LocalServer | None:
    version = _json(client.get(f"{root}/api/version"))
    if not version or "version" not in version:
        return None
    shown = _json(client.post(f"{root}/api/show", json={"model": model})) or {}
    found = re.search(r"^num_ctx\s+(\d+)", str(shown.get("parameters") or ""), re.MULTILINE)
    if found:
        tokens, source = int(found.group(1)), "the model's num_ctx parameter"
    else:
        tokens, source = OLLAMA_DEFAULT_CONTEXT, "the server's default (unless OLLAMA_CONTEXT_LENGTH is set)"
    return LocalServer(kind="ollama", version=str(version["version"]), context_tokens=tokens, context_source=source)


def _llama_cpp(client: Any, root: str) -> LocalServer | None:
    props = _json(client.get(f"{root}/props"))
    settings = (props or {}).get("default_generation_settings")
    if not isinstance(settings, dict):
        return None
    n_ctx = settings.get("n_ctx") or (props or {}).get("n_ctx")
    return LocalServer(
        kind="llama.cpp",
        version=str((props or {}).get("build_info") or ""),
        context_tokens=int(n_ctx) if isinstance(n_ctx, int) else None,
        context_source="the server's n_ctx (its -c flag)",
    )


PYTHON_SERVER_NOTE = (
    "llama.cpp's Python server sends no usage in a stream (harness counts with the server's tokenizer, "
    "marked estimated); its chatml-function-calling format HTML-escapes the prompt (the model reads "
    "`here&#39;s`, `&lt;` and may write them back): see docs/models.md"
)


def _llama_cpp_python(client: Any, root: str) -> LocalServer | None:
    info = (_json(client.get(f"{root}/openapi.json")) or {}).get("info")
    if not isinstance(info, dict) or "llama.cpp python" not in str(info.get("title") or "").lower():
        return None
    return LocalServer(kind="llama-cpp-python", version=str(info.get("version") or ""), warning=PYTHON_SERVER_NOTE)


def _warning(server: LocalServer, budget: int) -> str:
    keeps = f"{server.kind} keeps {server.context_tokens} tokens ({server.context_source}) but harness budgets {budget}"
    if server.kind == "ollama":
        fix = (
            f"start the server with OLLAMA_CONTEXT_LENGTH={budget}, or give the model `PARAMETER num_ctx {budget}`, "
            f"or set [context] budget_tokens = {server.context_tokens}"
        )
    else:
        fix = f"start llama-server with -c {budget}, or set [context] budget_tokens = {server.context_tokens}"
    return f"{keeps}: the rest of a long run would be cut silently; {fix}"
