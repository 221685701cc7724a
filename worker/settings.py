"""Configuration from the environment (prefix `PMEM_`), validated once at start-up."""

from __future__ import annotations

from typing import Literal

from pydantic import AliasChoices, Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from store.types import MemorySettings

DEFAULT_DATABASE_URL = "postgresql://postgres@localhost:5432/postgres"


class Settings(BaseSettings):
    """All runtime settings. Every field maps to `PMEM_<FIELD>` in the environment."""

    model_config = SettingsConfigDict(env_prefix="PMEM_", extra="ignore", frozen=True, populate_by_name=True)

    # Storage
    database_url: str = DEFAULT_DATABASE_URL
    db_pool_size: int = Field(default=10, ge=1)

    # NATS / JetStream
    nats_url: str = "nats://localhost:4222"
    subject: str = "chat.conversation.ended"
    stream: str = "CHAT"
    durable: str = "pmem-worker"
    create_stream: bool = True
    concurrency: int = Field(default=8, ge=1, le=1024)
    max_deliver: int = Field(default=5, ge=1)
    ack_wait_s: float = Field(default=60.0, gt=0)
    retry_delay_s: float = Field(default=5.0, ge=0)
    extracted_subject: str = "memory.extracted"
    dlq_subject: str = "pmem.dlq.conversation.ended"
    # Stream that keeps what the worker publishes (DLQ, memory.extracted) when no one listens.
    output_stream: str = "PMEM"
    max_retry_delay_s: float = Field(default=300.0, gt=0)
    # A database outage is waited out in place (the message kept alive) before the event is nacked.
    db_outage_timeout_s: float = Field(default=120.0, ge=0)
    # SIGTERM/SIGINT: stop fetching, let in-flight events finish for up to this long.
    shutdown_timeout_s: float = Field(default=30.0, gt=0)
    # The worker caches memory settings (per team/persona) this long; 0 reads them for every event.
    settings_cache_s: float = Field(default=10.0, ge=0)

    # Event limits
    max_messages: int = Field(default=500, ge=1)
    max_message_chars: int = Field(default=20_000, ge=1)
    max_total_chars: int = Field(default=200_000, ge=1)

    # LLM
    extractor: Literal["llm", "rules"] | None = None  # None: llm when a key or base URL is set, else rules
    llm_base_url: str | None = None
    llm_api_key: str | None = Field(
        default=None, validation_alias=AliasChoices("PMEM_LLM_API_KEY", "OPENAI_API_KEY")
    )
    llm_model: str = "gpt-4o-mini"
    llm_timeout_s: float = Field(default=60.0, gt=0)
    llm_max_retries: int = Field(default=3, ge=0)
    llm_max_input_tokens: int = Field(default=6000, ge=256)

    # Embeddings
    embedding_provider: Literal["openai", "local", "hashing"] = "hashing"
    embedding_base_url: str | None = None
    embedding_api_key: str | None = None
    embedding_model: str | None = None
    embedding_dim: int = Field(default=384, ge=1, le=16000)
    embedding_batch_size: int = Field(default=128, ge=1)
    # Send `dimensions` to /v1/embeddings: None = only for models known to support it (text-embedding-3*)
    embedding_send_dimensions: bool | None = None

    # Policy defaults (overridable globally, per team and per persona in the memory settings table)
    min_confidence: float = Field(default=0.5, ge=0.0, le=1.0)
    # Retention: pending memories older than this are rejected, archived ones erased (`pmem retention`)
    retention_pending_days: int = Field(default=30, ge=1)
    retention_archived_days: int = Field(default=30, ge=1)

    # Control plane (`pmem serve`)
    api_host: str = "127.0.0.1"
    api_port: int = Field(default=8080, ge=0, le=65535)
    auth_jwt_secret: str | None = None
    auth_jwt_public_key: str | None = None
    auth_issuer: str | None = None
    auth_audience: str | None = None
    # largest request body the API reads; larger ones get 413
    api_max_body_bytes: int = Field(default=1_000_000, ge=1024)

    # Observability
    http_port: int = Field(default=9464, ge=0, le=65535)
    log_level: str = "INFO"
    log_json: bool = True

    @field_validator("database_url")
    @classmethod
    def _database_url_is_postgres_or_sqlite(cls, value: str) -> str:
        if not value.startswith(("postgresql", "postgres://", "sqlite")):
            raise ValueError(
                "PMEM_DATABASE_URL must be a postgresql://… (or sqlite:///…) URL, "
                f"got {value.split('://', 1)[0]!r}"
            )
        return value

    @field_validator("auth_jwt_secret")
    @classmethod
    def _jwt_secret_is_long_enough(cls, value: str | None) -> str | None:
        if value is not None and len(value.encode()) < 32:
            raise ValueError(
                "PMEM_AUTH_JWT_SECRET must be at least 32 bytes (shorter HS256 keys can be brute-forced); "
                "generate one with `python3 -c 'import secrets; print(secrets.token_urlsafe(32))'`"
            )
        return value

    @model_validator(mode="after")
    def _embedding_endpoint_defaults_to_llm(self) -> Settings:
        # frozen model: fill derived defaults through object.__setattr__ once, at validation
        if self.embedding_base_url is None and self.llm_base_url is not None:
            object.__setattr__(self, "embedding_base_url", self.llm_base_url)
        if self.embedding_api_key is None and self.llm_api_key is not None:
            object.__setattr__(self, "embedding_api_key", self.llm_api_key)
        return self

    def memory_defaults(self) -> MemorySettings:
        """What the settings merge starts from: the deployment's defaults under global/team/persona rows."""
        return MemorySettings(
            min_confidence=self.min_confidence,
            pending_days=self.retention_pending_days,
            archived_days=self.retention_archived_days,
        )

    @property
    def effective_extractor(self) -> Literal["llm", "rules"]:
        """`llm` when configured explicitly or when an LLM endpoint/key is present, else `rules`."""
        if self.extractor is not None:
            return self.extractor
        return "llm" if (self.llm_api_key or self.llm_base_url) else "rules"


def load_settings(**overrides: object) -> Settings:
    """Read settings from the environment; keyword overrides win (used by the CLI and tests)."""
    return Settings(**overrides)  # type: ignore[arg-type]
