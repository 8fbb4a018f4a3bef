"""The model endpoint a hosted agent is given: a reverse proxy to the real one, holding the key.

A hosted agent (Claude Code, Codex...) speaks its own model protocol to `http://127.0.0.1:PORT/model`
inside its container; that port reaches this route on the controller, and nothing else does. Each
request goes on to the configured endpoint (`base_url`, or the vendor's) with the real key put in
the protocol's header: the agent's own key variable only ever holds a placeholder, so no container,
record or report sees the key. The answer streams back as it comes, read on the way for the usage
the protocol reports (Anthropic's `message_start`/`message_delta`, OpenAI's `usage`, the Responses
API's `response.completed`, Gemini's `usageMetadata`), which is priced and told to the run
(`on_usage`): the agent's tokens and cost are the run's, under its budget. Once the run's budget is
spent (`refusal` says why), requests are answered with the protocol's own error, never forwarded.
"""

from __future__ import annotations

import json
import ssl
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from harness.providers.pricing import PriceTable
from harness.types import Usage

MOUNT = "/model"
HOP_BY_HOP = {
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailers", "transfer-encoding",
    "upgrade", "host", "content-length", "accept-encoding",
}  # fmt: skip
KEY_HEADERS = {"x-api-key", "authorization", "x-goog-api-key", "api-key"}
"""Whatever key header the agent sent (a placeholder) is dropped; the real one is put in."""
DEFAULT_ENDPOINTS = {
    "anthropic": "https://api.anthropic.com",
    "openai-responses": "https://api.openai.com/v1",
    "openai": "https://api.openai.com/v1",
    "gemini": "https://generativelanguage.googleapis.com",
}


@dataclass(frozen=True)
class Exchange:
    """One model request the agent made, as the gateway saw it."""

    path: str
    status: int
    model: str
    usage: Usage
    cost_usd: float
    cost_known: bool
    duration_ms: int


class Gateway:
    """The `/model` route of a hosted agent's endpoint (see the module)."""

    def __init__(
        self,
        protocol: str,
        base_url: str | None,
        api_key: str | None,
        *,
        prices: PriceTable,
        on_usage: Callable[[Exchange], None],
        refusal: Callable[[], str | None] = lambda: None,
        ca_bundle: str | None = None,
    ) -> None:
        self.protocol = protocol
        self.upstream = (base_url or DEFAULT_ENDPOINTS[protocol]).rstrip("/")
        self.api_key = api_key
        self.prices, self.on_usage, self.refusal = prices, on_usage, refusal
        self.context = ssl.create_default_context(cafile=ca_bundle) if ca_bundle else ssl.create_default_context()
        self._open = 0
        self._quiet = threading.Condition()

    def settled(self, timeout: float) -> bool:
        """Wait (at most timeout seconds) until no model request is in flight, each one's usage told
        (`on_usage` runs once its answer has reached the agent, which may end its turn at that moment)."""
        with self._quiet:
            return self._quiet.wait_for(lambda: self._open == 0, timeout)

    def headers(self, given: list[tuple[bytes, bytes]]) -> dict[str, str]:
        """The request's headers as sent on: hop-by-hop and key headers out, the real key in."""
        kept = {
            name.decode("latin-1"): value.decode("latin-1")
            for name, value in given
            if name.decode("latin-1").lower() not in HOP_BY_HOP | KEY_HEADERS
        }
        if self.api_key:
            if self.protocol == "anthropic":
                kept["x-api-key"] = self.api_key
            elif self.protocol == "gemini":
                kept["x-goog-api-key"] = self.api_key
            else:
                kept["authorization"] = f"Bearer {self.api_key}"
        return kept

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """The ASGI app of the route (scope's path is what follows MOUNT)."""
        with self._quiet:
            self._open += 1
        try:
            await self._relay(scope, receive, send)
        finally:
            with self._quiet:
                self._open -= 1
                self._quiet.notify_all()

    async def _relay(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        import httpx

        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        refused = self.refusal()
        if refused is not None:
            await _whole(send, 400, _error_body(self.protocol, refused))
            return
        path = str(scope.get("path", "") or "/")
        path = path[len(MOUNT) :] if path.startswith(MOUNT + "/") or path == MOUNT else path  # the mount's own prefix
        query = scope.get("query_string", b"").decode("latin-1")
        url = self.upstream + path + (f"?{query}" if query else "")
        model = _model_of(body)
        started = time.monotonic()
        reader = UsageReader(self.protocol)
        status = 502
        billed = False

        def bill() -> None:
            nonlocal billed
            if billed:
                return
            billed = True
            usage = reader.usage()
            cost = self.prices.cost(reader.model or model, usage)
            self.on_usage(
                Exchange(
                    path=path, status=status, model=reader.model or model, usage=usage, cost_usd=cost.usd,
                    cost_known=cost.known, duration_ms=int((time.monotonic() - started) * 1000),
                )
            )  # fmt: skip

        try:
            async with httpx.AsyncClient(verify=self.context, timeout=httpx.Timeout(600.0, connect=30.0)) as client:
                request = client.build_request(
                    scope["method"], url, headers=self.headers(scope["headers"]), content=body
                )
                response = await client.send(request, stream=True)
                status = response.status_code
                headers = [
                    (k.encode("latin-1"), v.encode("latin-1"))
                    for k, v in response.headers.items()
                    if k.lower() not in HOP_BY_HOP | {"content-encoding"}
                ]
                await send({"type": "http.response.start", "status": status, "headers": headers})
                held: bytes | None = None  # each chunk goes on once the next came: the last waits for the bill
                async for chunk in _chunks(response):
                    reader.feed(chunk)
                    if held is not None:
                        await send({"type": "http.response.body", "body": held, "more_body": True})
                    held = chunk
                bill()  # before the agent reads the answer's end (it may send its next request at once)
                if held is not None:
                    await send({"type": "http.response.body", "body": held, "more_body": True})
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        except httpx.HTTPError as error:
            await _whole(send, 502, _error_body(self.protocol, f"harness's gateway could not reach the model: {error}"))
        finally:
            bill()


async def _chunks(response: Any) -> AsyncIterator[bytes]:
    async for chunk in response.aiter_bytes():
        yield chunk


async def _whole(send: Any, status: int, body: bytes) -> None:
    await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": body, "more_body": False})


def _error_body(protocol: str, message: str) -> bytes:
    """An error in the protocol's own shape (the agent shows its message and stops)."""
    if protocol == "anthropic":
        return json.dumps({"type": "error", "error": {"type": "invalid_request_error", "message": message}}).encode()
    if protocol == "gemini":
        return json.dumps({"error": {"code": 400, "message": message, "status": "FAILED_PRECONDITION"}}).encode()
    return json.dumps({"error": {"message": message, "type": "invalid_request_error", "code": "harness"}}).encode()


def _model_of(body: bytes) -> str:
    try:
        found = json.loads(body)
    except ValueError:
        return ""
    return str(found.get("model") or "") if isinstance(found, dict) else ""


class UsageReader:
    """The usage an answer reports, read from its bytes as they stream (SSE `data:` lines or one JSON
    body), in whichever protocol's shape it comes."""

    def __init__(self, protocol: str) -> None:
        self.protocol = protocol
        self.buffer = b""
        self.whole = b""
        self.found = {"input": 0, "output": 0, "cached": 0, "written": 0}
        self.model = ""

    def feed(self, chunk: bytes) -> None:
        self.whole += chunk if len(self.whole) < 4 << 20 else b""
        self.buffer += chunk
        *lines, self.buffer = self.buffer.split(b"\n")
        for line in lines:
            if line.startswith(b"data:"):
                self._payload(line[5:].strip())

    def usage(self) -> Usage:
        if not any(self.found.values()) and self.whole.lstrip().startswith(b"{"):
            self._payload(self.whole.strip())  # a whole JSON answer
        found = self.found
        return Usage(
            input_tokens=found["input"] + found["cached"] + found["written"]
            if self.protocol == "anthropic"
            else found["input"],
            output_tokens=found["output"],
            cached_input_tokens=found["cached"],
            cache_write_tokens=found["written"],
        )

    def _payload(self, raw: bytes) -> None:
        try:
            data = json.loads(raw)
        except ValueError:
            return
        if isinstance(data, dict):
            self._take(data)

    def _take(self, data: dict[str, Any]) -> None:
        self.model = str(data.get("model") or self.model)
        message = data.get("message") if isinstance(data.get("message"), dict) else None
        response = data.get("response") if isinstance(data.get("response"), dict) else None
        for holder in (data, message, response):
            if isinstance(holder, dict):
                self.model = str(holder.get("model") or holder.get("modelVersion") or self.model)
                usage = holder.get("usage") or holder.get("usageMetadata")
                if isinstance(usage, dict):
                    self._usage(usage)

    def _usage(self, usage: dict[str, Any]) -> None:
        def number(*keys: str) -> int | None:
            for key in keys:
                value = usage.get(key)
                if isinstance(value, int) and not isinstance(value, bool):
                    return value
            return None

        found = self.found
        for slot, keys in (
            ("input", ("input_tokens", "prompt_tokens", "promptTokenCount")),
            ("output", ("output_tokens", "completion_tokens", "candidatesTokenCount")),
            ("cached", ("cache_read_input_tokens", "cachedContentTokenCount")),
            ("written", ("cache_creation_input_tokens",)),
        ):
            value = number(*keys)
            if value is not None:
                found[slot] = max(found[slot], value) if slot == "output" else (value or found[slot])
        details = usage.get("input_tokens_details") or usage.get("prompt_tokens_details")
        if isinstance(details, dict) and isinstance(details.get("cached_tokens"), int):
            found["cached"] = details["cached_tokens"]
