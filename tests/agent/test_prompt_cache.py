"""Cache-friendly prompt layout over the real SDKs: across the steps of one `harness run`, every request
starts with the previous request unchanged (tools, system prompt, task, earlier turns), and the
Anthropic request marks the end of the pinned head (tools + system + task) as a cache breakpoint."""

from __future__ import annotations

import itertools
import json

import pytest

from tests.providers.wire_server import WireServer, anthropic_turn, openai_turn

pytestmark = [pytest.mark.docker, pytest.mark.timeout(300)]
KEY = "sk-cache-test-00112233445566"
READ = json.dumps({"path": "calc/ops.py"})
LIST = json.dumps({"path": "calc"})


def head_and_history(vendor: str, body: dict) -> tuple[str, list]:
    """(everything before the conversation, the conversation), re-serialised in the order received."""
    if vendor == "anthropic":
        head = {"tools": body["tools"], "system": body["system"]}
        return json.dumps(head), body["messages"]
    return json.dumps({"tools": body["tools"]}), body["messages"]


@pytest.mark.parametrize("vendor", ["openai", "anthropic"])
def test_consecutive_requests_share_an_identical_prefix(harness, vendor):
    make = openai_turn if vendor == "openai" else anthropic_turn
    with WireServer() as server:
        cached = {} if vendor == "openai" else {"cache_read": 900, "input_tokens": 100}
        server.push(
            make("Reading.", [("c1", "read_file", READ)], **cached),
            make("Listing.", [("c2", "list_dir", LIST)], **cached),
            make("Nothing to change.", **cached),
        )
        url = server.openai_base_url if vendor == "openai" else server.anthropic_base_url
        ran = harness.run(
            f"{vendor}:wire-model",
            "--base-url",
            url,
            verify=None,
            env={"OPENAI_API_KEY": KEY, "ANTHROPIC_API_KEY": KEY},
        )
        bodies = [request.body for request in server.requests]
    assert ran.code == 10 and ran.json()["steps"] == 3, ran.stdout + ran.stderr
    assert len(bodies) == 3
    for earlier, later in itertools.pairwise(bodies):
        head, history = head_and_history(vendor, earlier)
        later_head, later_history = head_and_history(vendor, later)
        assert later_head == head
        assert len(later_history) > len(history)
        assert json.dumps(later_history[: len(history)]) == json.dumps(history)  # key order included
    if vendor == "anthropic":
        for body in bodies:
            task = body["messages"][0]["content"]
            assert task[-1]["cache_control"] == {"type": "ephemeral"}
            # rolling breakpoints: the head, where the previous request ended, and this one's end
            assert body["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
            ends = len(body["messages"])
            assert json.dumps(body).count("cache_control") == len({0, max(ends - 3, 0), ends - 1})
        assert ran.json()["tokens"]["cached"] == 3 * 900  # reported cache reads reach the run's totals
    else:
        assert [m["role"] for m in bodies[0]["messages"]] == ["system", "user"]
