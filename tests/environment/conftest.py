"""The environment's tests run real sessions too: the run fixtures of tests/agent (a state folder, a
scripted model, an OCI registry of features on 127.0.0.1)."""

from tests.agent.conftest import harness, registry, script

__all__ = ["harness", "registry", "script"]
