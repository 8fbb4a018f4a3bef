"""Provider overhead: pre-recorded SSE bytes through the real SDKs over an in-process transport.

Side by side in one run, per provider: the SDK alone iterating the stream (parse floor) versus the
full `complete()` (SDK + our assembly + argument validation). The difference is our overhead.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from typing import Any

import httpx2
from pydantic import BaseModel

from harness.bench.measure import side_by_side
from harness.providers.anthropic import AnthropicProvider, EventAssembly
from harness.providers.config import ProviderConfig
from harness.providers.openai_compat import OpenAICompatProvider, StreamAssembly
from harness.providers.sse import read_body
from harness.types import Message, ToolSchema

_TOOL = ToolSchema(name="write_file", description="Write a file.", parameters={"type": "object"})
_MESSAGES = [Message(role="user", content="go")]


class ProviderBench(BaseModel):
    """Medians for one provider's 200-chunk streamed turn with two tool calls."""

    provider: str
    chunks: int
    sdk_only_ms: float
    complete_ms: float
    overhead_ms: float
    """complete - sdk_only: assembly + validation + request building (noisy: a difference)."""
    assembly_ms: float
    """Our assembly + argument validation alone, over the SDK's already-parsed chunks."""
    assembly_us_per_chunk: float
    complete_us_per_chunk: float
    overhead_us_per_chunk: float
    ratio: float
    """complete / sdk_only."""


def _args(n: int) -> str:
    return json.dumps({"path": f"pkg/module_{n}.py", "content": "x = 1\n" * 120})


def _pieces(text: str, count: int) -> list[str]:
    """Exactly `count` fragments of `text` (it is longer than `count`)."""
    size, extra = divmod(len(text), count)
    bounds = [n * size + min(n, extra) for n in range(count + 1)]
    return [text[bounds[n] : bounds[n + 1]] for n in range(count)]


def openai_sse(chunks: int = 200) -> bytes:
    """A chat-completions stream of `chunks` data frames: two parallel tool calls, interleaved."""
    fragments = chunks - 5  # role, two call heads, finish, usage
    frames: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
    parts = [_pieces(_args(n), fragments // 2 + (n < fragments % 2)) for n in range(2)]
    for n in range(2):
        frames.append(
            {
                "tool_calls": [
                    {
                        "index": n,
                        "id": f"call_{n}",
                        "type": "function",
                        "function": {"name": "write_file", "arguments": ""},
                    }
                ]
            }
        )
    for i in range(max(len(p) for p in parts)):
        for n in range(2):
            if i < len(parts[n]):
                frames.append({"tool_calls": [{"index": n, "function": {"arguments": parts[n][i]}}]})
    body = [
        {
            "id": "c",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "gpt-4.1",
            "choices": [{"index": 0, "delta": d, "finish_reason": None}],
        }
        for d in frames
    ]
    body.append(
        {
            "id": "c",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "gpt-4.1",
            "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}],
        }
    )
    body.append(
        {
            "id": "c",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "gpt-4.1",
            "choices": [],
            "usage": {"prompt_tokens": 900, "completion_tokens": 400, "total_tokens": 1300},
        }
    )
    return b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in body) + b"data: [DONE]\n\n"


def anthropic_sse(chunks: int = 200) -> bytes:
    """A Messages stream of about `chunks` events: two tool_use blocks."""

    def event(name: str, data: dict[str, Any]) -> bytes:
        return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()

    usage = {"input_tokens": 900, "output_tokens": 1}
    out = [
        event(
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": "m",
                    "type": "message",
                    "role": "assistant",
                    "model": "claude-sonnet-4-6",
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": usage,
                },
            },
        )
    ]
    deltas = chunks - 8  # message start/delta/stop, two block starts and stops, one spare ping below
    out.append(event("ping", {"type": "ping"}))
    for n in range(2):
        per_call = deltas // 2 + (n < deltas % 2)
        out.append(
            event(
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": n,
                    "content_block": {"type": "tool_use", "id": f"toolu_{n}", "name": "write_file", "input": {}},
                },
            )
        )
        out += [
            event(
                "content_block_delta",
                {"type": "content_block_delta", "index": n, "delta": {"type": "input_json_delta", "partial_json": p}},
            )
            for p in _pieces(_args(n), per_call)
        ]
        out.append(event("content_block_stop", {"type": "content_block_stop", "index": n}))
    out.append(
        event(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "tool_use", "stop_sequence": None},
                "usage": {"output_tokens": 400},
            },
        )
    )
    out.append(event("message_stop", {"type": "message_stop"}))
    return b"".join(out)


def _client(body: bytes) -> httpx2.Client:
    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=body)

    return httpx2.Client(transport=httpx2.MockTransport(handler))


def _paired_medians(first: Callable[[], Any], second: Callable[[], Any], repeats: int) -> tuple[float, float]:
    """Median ms of each, measured side by side (warm-up: imports, pydantic model building)."""
    samples = side_by_side({"first": first, "second": second}, rounds=repeats)
    return statistics.median(samples["first"]), statistics.median(samples["second"])


def bench_provider(kind: str, *, chunks: int = 200, repeats: int = 50) -> ProviderBench:
    """Measure one provider ("openai" or "anthropic")."""
    body = openai_sse(chunks) if kind == "openai" else anthropic_sse(chunks)
    frames = body.count(b"data: {")
    config = ProviderConfig(
        model="gpt-4.1" if kind == "openai" else "claude-sonnet-4-6", base_url="http://bench.invalid"
    )
    cls = OpenAICompatProvider if kind == "openai" else AnthropicProvider
    provider = cls(config, api_key="bench", http_client=_client(body))
    client: Any = provider._client  # the same SDK client (either vendor's), iterated without our assembly

    def sdk_only() -> list[Any]:
        if kind == "openai":
            stream = client.chat.completions.create(
                model=config.model, messages=[{"role": "user", "content": "go"}], stream=True, tools=[_TOOL.openai()]
            )
        else:
            stream = client.messages.create(
                model=config.model,
                max_tokens=1024,
                stream=True,
                tools=[_TOOL.anthropic()],
                messages=[{"role": "user", "content": "go"}],
            )
        return list(stream)

    def full() -> None:
        turn = provider.complete(_MESSAGES, [_TOOL], max_tokens=1024)
        assert len(turn.tool_calls) == 2 and all(c.parse_error is None for c in turn.tool_calls)

    floor, total = _paired_medians(sdk_only, full, repeats)
    # What our assembly folds: wire items we read ourselves (OpenAI), the SDK's parsed events (Anthropic).
    parsed: list[Any] = list(read_body(body.decode().splitlines(), None)) if kind == "openai" else sdk_only()

    def assemble() -> None:
        assembly: Any = StreamAssembly() if kind == "openai" else EventAssembly()
        for item in parsed:
            assembly.add(item)
        assert len(assembly.turn().tool_calls) == 2

    assembly_ms, _ = _paired_medians(assemble, lambda: None, repeats)
    overhead = total - floor
    return ProviderBench(
        provider=kind,
        chunks=frames,
        sdk_only_ms=round(floor, 3),
        complete_ms=round(total, 3),
        overhead_ms=round(overhead, 3),
        complete_us_per_chunk=round(total * 1000 / frames, 2),
        overhead_us_per_chunk=round(overhead * 1000 / frames, 2),
        ratio=round(total / floor, 3),
        assembly_ms=round(assembly_ms, 4),
        assembly_us_per_chunk=round(assembly_ms * 1000 / frames, 3),
    )
