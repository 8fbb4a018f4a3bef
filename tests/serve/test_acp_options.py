"""`harness acp`'s session config options without a client or an engine: what a session offers, what a
client may set (a model by PROVIDER:MODEL, an image harness builds, a step limit) and what is refused
(the image once the session has run), each refusal an invalid-params error naming the rule."""

from __future__ import annotations

import asyncio

import pytest
from acp import RequestError

from harness.cli.acp_agent import HarnessAgent


class Quiet:
    """A client connection that takes every update (a session with no run tells none)."""

    async def session_update(self, **update: object) -> None:
        return None


def test_a_session_offers_its_defaults_and_takes_only_valid_values(tmp_path):
    agent = HarnessAgent(tmp_path / "sessions", ["--model", "anthropic:claude-sonnet-4-6", "--max-steps", "30"], "0")

    async def scenario() -> None:
        made = await agent.new_session(cwd=str(tmp_path))
        current = {o.id: o.current_value for o in made.config_options}
        assert current == {"model": "anthropic:claude-sonnet-4-6", "image": "py311", "max_steps": "30"}
        changed = await agent.set_config_option("model", made.session_id, "openai:gpt-5.2")
        assert {o.id: o.current_value for o in changed.config_options}["model"] == "openai:gpt-5.2"
        for option, value in (("model", "nonsense"), ("image", "bogus"), ("max_steps", "0"), ("colour", "red")):
            with pytest.raises(RequestError):
                await agent.set_config_option(option, made.session_id, value)
        await agent.set_config_option("image", made.session_id, "node")
        agent.open[made.session_id].has_run = True
        with pytest.raises(RequestError, match="Invalid params"):
            await agent.set_config_option("image", made.session_id, "py311")
        with pytest.raises(RequestError):
            await agent.new_session(cwd=str(tmp_path / "missing"))
        with pytest.raises(RequestError):
            await agent.load_session(cwd=str(tmp_path), session_id="../etc")
        again = HarnessAgent(tmp_path / "sessions", [], "0")  # another process of it: the session is on disk
        again.conn = Quiet()
        await again.load_session(cwd="/somewhere/else", session_id=made.session_id)
        assert again.open[made.session_id].repo == tmp_path and not again.open[made.session_id].has_run

    asyncio.run(scenario())
