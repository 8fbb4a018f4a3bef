"""`bedrock:MODEL` and `vertex:MODEL` — Anthropic models through AWS Bedrock and Google Vertex AI.

The same Messages protocol, stream assembly, thinking, cache breakpoints and error classification as
`anthropic:` (this is `AnthropicProvider` with the SDK's Bedrock or Vertex client); what differs is
the model id (`anthropic.claude-sonnet-4-6`, `eu.anthropic.claude-haiku-4-5-20251001-v1:0`;
`claude-sonnet-4-6@20250929`), the endpoint and the auth, which is each cloud's usual credential
chain: AWS keys, profile, SSO or role (SigV4 signing by botocore), or a Bedrock API key; Google's
application default credentials. harness reads none of them itself: the cloud's library does.
Install with `pip install 'harness[bedrock]'` or `'harness[vertex]'`.
"""

from __future__ import annotations

from typing import Any

import anthropic
import httpx2

from harness.errors import ConfigError, ModelAuthError
from harness.providers.anthropic import AnthropicProvider
from harness.providers.config import ProviderConfig
from harness.providers.factory import register_provider
from harness.providers.stream import sdk_timeout

VERTEX_DEFAULT_REGION = "us-east5"


class Bedrock:
    """Anthropic models on AWS Bedrock (InvokeModel, streamed as AWS event-stream frames)."""

    prefix = "bedrock"
    auth_hint = (
        "AWS credentials come from the usual chain: AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE, "
        "~/.aws, SSO or an instance role; or a Bedrock API key in AWS_BEARER_TOKEN_BEDROCK"
    )

    def client(self, config: ProviderConfig, api_key: str | None, http_client: httpx2.Client | None) -> Any:
        try:
            import botocore  # noqa: F401 - signing needs it; say so now rather than at the first call
        except ModuleNotFoundError as error:
            raise ConfigError("bedrock: needs boto3 (pip install 'harness[bedrock]')") from error
        return anthropic.AnthropicBedrock(
            aws_region=config.region,
            api_key=api_key,
            base_url=config.base_url,
            timeout=sdk_timeout(config),
            max_retries=0,
            http_client=http_client,
            open_telemetry=False,
        )

    def auth_errors(self) -> tuple[type[BaseException], ...]:
        from botocore.exceptions import BotoCoreError

        # The SDK signs each request itself and says "Could not resolve AWS credentials" with a bare
        # RuntimeError when the chain finds none (harness's own errors, ModelError included, are
        # caught before these are looked at).
        return (BotoCoreError, RuntimeError)


class Vertex:
    """Anthropic models on Google Vertex AI (streamRawPredict)."""

    prefix = "vertex"
    auth_hint = (
        "Google credentials come from application default credentials: GOOGLE_APPLICATION_CREDENTIALS, "
        "`gcloud auth application-default login`, or the machine's service account"
    )

    def client(self, config: ProviderConfig, api_key: str | None, http_client: httpx2.Client | None) -> Any:
        try:
            import google.auth
            from google.auth.exceptions import GoogleAuthError
        except ModuleNotFoundError as error:
            raise ConfigError("vertex: needs google-auth (pip install 'harness[vertex]')") from error
        try:
            credentials, found_project = google.auth.default(scopes=["https://www.googleapis.com/auth/cloud-platform"])
        except GoogleAuthError as error:
            raise ModelAuthError(f"vertex credentials: {error} ({self.auth_hint})") from None
        project = config.project or found_project
        if not project:
            raise ConfigError("vertex: no Google Cloud project: pass --project or set ANTHROPIC_VERTEX_PROJECT_ID")
        return anthropic.AnthropicVertex(
            region=config.region or VERTEX_DEFAULT_REGION,
            project_id=project,
            credentials=credentials,
            base_url=config.base_url,
            timeout=sdk_timeout(config),
            max_retries=0,
            http_client=http_client,
            open_telemetry=False,
        )

    def auth_errors(self) -> tuple[type[BaseException], ...]:
        from google.auth.exceptions import GoogleAuthError

        return (GoogleAuthError,)


def _bedrock(target: str, config: ProviderConfig, api_key: str | None) -> AnthropicProvider:
    return AnthropicProvider(config.model_copy(update={"model": target}), api_key=api_key, cloud=Bedrock())


def _vertex(target: str, config: ProviderConfig, api_key: str | None) -> AnthropicProvider:
    return AnthropicProvider(config.model_copy(update={"model": target}), api_key=None, cloud=Vertex())


register_provider("bedrock", _bedrock)
register_provider("vertex", _vertex)
