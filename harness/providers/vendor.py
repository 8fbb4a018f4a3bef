"""`PROVIDER:MODEL`, parsed in one place, and the one table of providers: which module serves each
prefix, whether it talks to a network endpoint, and the names of the environment variables its key,
endpoint and cloud settings are usually in (only the CLI reads them; this table only names them).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.errors import ConfigError


@dataclass(frozen=True)
class Vendor:
    """One model-spec prefix and what harness knows about it."""

    prefix: str
    module: str
    """The module that registers the prefix's factory (imported when the prefix is first named)."""
    networked: bool = False
    """Talks to an endpoint: behind the retry policy, priced."""
    key_env: str | None = None
    """The variable the key is usually in (a provider entry's `api_key_env` names another)."""
    key_required: bool = False
    """The vendor's own endpoint answers nothing without a key (a local base_url may need none)."""
    base_url_env: str | None = None
    """The variable an endpoint is read from when neither flag nor config file names one."""
    cloud_env: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Where a cloud's region and project are read when neither flag nor config file names them."""
    openai_protocol: bool = False
    """Speaks an OpenAI protocol, as the local servers do (Ollama, llama.cpp, vLLM)."""
    file_target: bool = False
    """The target is a file (scripted, reference): made absolute so a resume works anywhere."""
    hosted_by: str | None = None
    """Only the hosted agent of this name speaks the protocol (harness's own loop does not)."""


VENDORS: dict[str, Vendor] = {
    vendor.prefix: vendor
    for vendor in (
        Vendor(
            "openai",
            "harness.providers.openai_compat",
            networked=True,
            key_env="OPENAI_API_KEY",
            key_required=True,
            base_url_env="OPENAI_BASE_URL",
            openai_protocol=True,
        ),
        Vendor(
            "openai-responses",
            "harness.providers.openai_responses",
            networked=True,
            key_env="OPENAI_API_KEY",
            key_required=True,
            base_url_env="OPENAI_BASE_URL",
            openai_protocol=True,
        ),
        Vendor(
            "anthropic",
            "harness.providers.anthropic",
            networked=True,
            key_env="ANTHROPIC_API_KEY",
            key_required=True,
            base_url_env="ANTHROPIC_BASE_URL",
        ),
        Vendor(
            "bedrock",
            "harness.providers.anthropic_cloud",
            networked=True,
            key_env="AWS_BEARER_TOKEN_BEDROCK",  # optional: without it, the AWS credential chain signs
            base_url_env="ANTHROPIC_BEDROCK_BASE_URL",
            cloud_env={"region": ("AWS_REGION", "AWS_DEFAULT_REGION")},
        ),
        Vendor(
            "vertex",
            "harness.providers.anthropic_cloud",
            networked=True,
            base_url_env="ANTHROPIC_VERTEX_BASE_URL",
            cloud_env={
                "region": ("CLOUD_ML_REGION",),
                "project": ("ANTHROPIC_VERTEX_PROJECT_ID", "GOOGLE_CLOUD_PROJECT"),
            },
        ),
        Vendor(
            "gemini",
            "",
            networked=True,
            key_env="GEMINI_API_KEY",
            key_required=True,
            base_url_env="GOOGLE_GEMINI_BASE_URL",
            hosted_by="gemini",
        ),
        Vendor("scripted", "harness.providers.scripted", file_target=True),
        Vendor("replay", "harness.providers.replay"),
        Vendor("reference", "harness.providers.reference", file_target=True),
        Vendor("reference-change", "harness.providers.reference", file_target=True),
    )
}

UNKNOWN = Vendor("", "")
"""What an unknown prefix is taken for where no provider is built (a key lookup, a label)."""


@dataclass(frozen=True)
class ModelSpec:
    """A model as `PREFIX:TARGET`: `openai:gpt-4.1`, `scripted:FILE`, `reference:` (a batch's); as
    `AGENT@PREFIX:TARGET`, that model given to a hosted agent (`claude-code@anthropic:claude-sonnet-4-6`:
    docs/agents.md). Only the part before the first `:` can name an agent (a Vertex model's own `@`
    is in its target)."""

    prefix: str
    target: str
    agent: str = ""

    @classmethod
    def of(cls, text: str | None) -> ModelSpec:
        """Split a spec without judging it (an empty or prefix-less one has an empty part)."""
        head, _, target = (text or "").partition(":")
        agent, _, prefix = head.rpartition("@")
        return cls(prefix, target, agent)

    @classmethod
    def parse(cls, text: str) -> ModelSpec:
        """A spec a provider can be built from; ConfigError, saying the forms, when it is not one."""
        spec = cls.of(text)
        if spec.prefix == "reference" and ":" in text and not spec.target:
            raise ConfigError(
                "reference: needs a task's reference file: use `harness batch --model reference:` on mined tasks "
                "(each task names its own), or reference:PATH/reference.json"
            )
        if ":" not in text or not spec.prefix or not spec.target:
            raise ConfigError(
                f"model spec {text!r} must look like openai:MODEL, openai-responses:MODEL, anthropic:MODEL, "
                "bedrock:MODEL, vertex:MODEL or scripted:FILE"
            )
        return spec

    @property
    def vendor(self) -> Vendor:
        """The prefix's entry of the table (`UNKNOWN` for a prefix harness does not know)."""
        return VENDORS.get(self.prefix, UNKNOWN)

    def with_target(self, target: str) -> str:
        """The spec text with another target (a file's absolute path, a worker's copy)."""
        return f"{self.agent}@{self.prefix}:{target}" if self.agent else f"{self.prefix}:{target}"

    @property
    def model(self) -> str:
        """The model's own spec, without the agent it is given to (what a provider is built from)."""
        return f"{self.prefix}:{self.target}"

    def __str__(self) -> str:
        return self.with_target(self.target)


def prefix_of(model: str | None) -> str:
    """The provider prefix of a model spec (`openai`, `anthropic`, `scripted`...)."""
    return ModelSpec.of(model).prefix
