"""The worker end to end: real nats-server, real Postgres + pgvector, the real `openai` client talking
to the fake OpenAI-compatible server over HTTP."""

from __future__ import annotations

import json
import logging
import uuid
from typing import Any

import pytest
from nats.js.api import AckPolicy, ConsumerConfig
from prometheus_client.parser import text_string_to_metric_families

from extraction.embeddings import close_embedder
from testkit.fake_openai import Reply
from tests.worker.worker_harness import Harness, conversation, http_get, memory_values, wait_for
from worker.app import build_worker
from worker.events import DLQ_REASON_HEADER, ConversationEnded, event_fingerprint
from worker.pipeline import Outcome, process_event
from worker.streams import consumer_config

pytestmark = pytest.mark.asyncio


async def rows(h: Harness) -> list[tuple[Any, ...]]:
    return await h.sql(
        "SELECT scope, owner_id, user_id, key, value, status, source_channel_id"
        " FROM memories ORDER BY scope, key"
    )


async def processed_at_least(h: Harness, n: int) -> None:
    async def check() -> bool:
        return await h.processed() >= n

    await wait_for(check, what=f"{n} processed events")


async def dlq_at_least(h: Harness, n: int, within: float = 20) -> None:
    async def check() -> bool:
        return len(await h.dlq()) >= n

    await wait_for(check, within=within, what=f"{n} DLQ messages")


async def test_happy_path_without_and_with_persona(harness: Harness) -> None:
    h = harness
    user, persona = uuid.uuid4(), uuid.uuid4()
    plain = conversation("I live in Lisbon. I'm vegetarian.", "Noted!", user_id=user)
    with_persona = conversation(
        "My name is Alice. I'm allergic to peanuts.", "Ok.", user_id=user, persona_id=persona
    )
    async with h.worker() as worker:
        await h.publish(plain)
        await h.publish(with_persona)
        await processed_at_least(h, 2)
        await wait_for(lambda: _extracted_count(h, 2), what="memory.extracted messages")
        readyz = await http_get(worker.health.port if worker.health else 0, "/readyz")
        metrics = await http_get(worker.health.port if worker.health else 0, "/metrics")
    got = await rows(h)
    plain_channel, persona_channel = uuid.UUID(plain["channel_id"]), uuid.UUID(with_persona["channel_id"])
    assert sorted((r[0], r[3], r[1], r[2], r[6]) for r in got) == sorted(
        [
            ("user", "home location", user, None, plain_channel),
            ("user", "diet preference", user, None, plain_channel),
            ("persona_user", "user name", persona, user, persona_channel),
            ("persona_user", "allergy peanuts", persona, user, persona_channel),
        ]
    )
    assert {r[5] for r in got} == {"pending_review"}
    announced = {str(m.event_id): m for m in await h.extracted()}
    assert set(announced) == {plain["event_id"], with_persona["event_id"]}
    assert sorted(m.key for m in announced[with_persona["event_id"]].memories) == [
        "allergy peanuts",
        "user name",
    ]
    assert {m.action for m in announced[plain["event_id"]].memories} == {"created"}
    # one batched embeddings call per event, one chat call per event
    assert h.fake.counters["chat"] == 2 and h.fake.counters["embeddings"] == 2
    assert readyz[0] == 200
    assert 'pmem_events_total{outcome="processed"} 2.0' in metrics[1]
    assert 'pmem_memories_written_total{action="created",scope="persona_user"} 2.0' in metrics[1]
    assert "pmem_llm_tokens_total" in metrics[1]
    assert await h.consumer_state() == (0, 0)


async def test_persona_learning_off_writes_no_persona_rows(harness: Harness) -> None:
    h = harness
    user, persona, learning = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    h.fake.set_chat_responder(_persona_answer)
    async with h.worker() as worker:
        await worker.store.settings.put_settings(level="persona", target_id=learning, persona_learning=True)
        await h.publish(
            conversation("Refunds take 30 days, right?", "Yes.", user_id=user, persona_id=persona)
        )
        await h.publish(
            conversation("Refunds take 30 days, right?", "Yes.", user_id=user, persona_id=learning)
        )
        await processed_at_least(h, 2)
    by_owner = {(r[0], r[1]) for r in await rows(h)}
    assert ("persona", learning) in by_owner
    assert ("persona", persona) not in by_owner
    assert ("persona_user", persona) in by_owner


async def test_duplicates_write_one_set_of_rows(harness: Harness) -> None:
    h = harness
    event = conversation("I live in Porto and I work as a nurse.", "Nice.")
    async with h.worker() as worker:
        first = await h.publish(event)
        again = await h.publish(event)  # same Nats-Msg-Id: JetStream drops it
        assert again.duplicate and again.seq == first.seq
        await processed_at_least(h, 1)
        await wait_for(lambda: _settled(h), what="consumer drained")
        before = await rows(h)
        # the same event again as a new message (a publisher retry outside the dedup window)
        await h.publish(event, msg_id=f"{event['event_id']}-again")
        await wait_for(lambda: _outcome(worker, "duplicate", 1), what="duplicate outcome")
    assert await rows(h) == before
    assert len(before) == 2
    assert await h.processed() == 1
    assert await h.count("SELECT count(*) FROM memory_audit") == 2
    # a first delivery skips the early processed-event lookup: the transaction refused it
    assert h.fake.counters["chat"] == 2


async def test_an_event_sent_again_as_a_new_message_is_a_duplicate_on_its_first_delivery(
    harness: Harness,
) -> None:
    h = harness
    event = conversation("I live in Porto and I work as a nurse.", "Nice.")
    async with h.worker() as worker:
        await h.publish(event, msg_id=f"{event['event_id']}-first")
        await processed_at_least(h, 1)
        await wait_for(lambda: _settled(h), what="consumer drained")
        # the same event again under another message id: JetStream delivers it, the write refuses it
        await h.publish(event, msg_id=f"{event['event_id']}-second")
        await wait_for(lambda: _outcome(worker, "duplicate", 1), what="duplicate outcome")
        await wait_for(lambda: _settled(h), what="consumer drained")
        info = await h.nc.jsm().consumer_info(h.base["stream"], h.base["durable"])
        assert await _value(worker, "pmem_events_total", outcome="processed") == 1
        assert await _value(worker, "pmem_events_total", outcome="duplicate") == 1
        assert await _value(worker, "pmem_events_total", outcome="retried") == 0
        assert await _value(worker, "pmem_retries_total", reason="unexpected") == 0
    # two messages, one delivery each: the duplicate was decided on its first delivery
    assert info.delivered.consumer_seq == 2 and info.num_redelivered == 0
    assert await h.processed() == 1
    assert await h.dlq() == []


async def test_a_redelivered_committed_event_never_reaches_the_llm(harness: Harness) -> None:
    # what a redelivery after "committed, then crashed before the ack" does
    h = harness
    event = ConversationEnded.model_validate(conversation("I live in Bern.", "Ok."))
    worker = await build_worker(h.settings(), serve_http=False)
    try:
        first = await process_event(event, worker.deps, check_processed=False)
        assert first.status == "processed" and len(first.written) == 1
        calls = h.fake.counters["chat"]
        again = await process_event(event, worker.deps, check_processed=True)
        assert again.status == "duplicate" and again.written == ()
        assert h.fake.counters["chat"] == calls
    finally:
        await worker.store.close()
        await worker.extractor.close()
        await close_embedder(worker.embedder)
    assert await h.count("SELECT count(*) FROM memories") == 1


async def test_a_reused_event_id_with_another_body_is_logged_as_such(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    h = harness
    document = conversation("I live in Bern.", "Ok.")
    event = ConversationEnded.model_validate(document)
    changed = event.model_copy(update={"messages": (*event.messages[:1], *event.messages[:1])})
    worker = await build_worker(h.settings(), serve_http=False)
    try:
        assert (await process_event(event, worker.deps, check_processed=False)).status == "processed"
        caplog.set_level(logging.INFO, logger="pmem")
        same = await process_event(event, worker.deps, check_processed=False)
        assert same.status == "duplicate"
        assert not [r for r in caplog.records if "another body" in r.getMessage()]
        other = await process_event(changed, worker.deps, check_processed=False)
        assert other.status == "duplicate"
    finally:
        await worker.store.close()
        await worker.extractor.close()
        await close_embedder(worker.embedder)
    said = [r for r in caplog.records if "another body" in r.getMessage()]
    assert len(said) == 1 and said[0].levelno == logging.WARNING
    line = said[0].getMessage()
    assert str(event.event_id) in line
    assert event_fingerprint(event)[:16] in line and event_fingerprint(changed)[:16] in line


async def _commit_without_publishing(h: Harness, event: dict[str, Any]) -> Outcome:
    """What a worker that committed the event and died before publishing memory.extracted left."""
    worker = await build_worker(h.settings(), serve_http=False)
    try:
        outcome = await process_event(ConversationEnded.model_validate(event), worker.deps)
    finally:
        await worker.store.close()
        await worker.extractor.close()
        await close_embedder(worker.embedder)
    assert outcome.status == "processed" and len(outcome.written) == 2
    return outcome


@pytest.mark.parametrize("redelivered", [True, False], ids=["redelivery", "new-message"])
async def test_committed_but_unpublished_event_is_announced_on_its_next_delivery(
    harness: Harness, redelivered: bool
) -> None:
    h = harness
    event = conversation("I live in Porto and I work as a nurse.", "Nice.")
    committed = await _commit_without_publishing(h, event)
    calls = h.fake.counters["chat"]
    if redelivered:
        # the dead worker had received the message: it comes back as delivery 2 (early
        # processed-event lookup, no LLM call)
        await h.ensure_streams()
        await h.nc.jsm().add_consumer(h.base["stream"], config=consumer_config(h.settings()))
        await h.publish(event)
        pull = await h.nc.jetstream().pull_subscribe_bind(durable=h.base["durable"], stream=h.base["stream"])
        (received,) = await pull.fetch(1, timeout=5)
        await received.nak()
        await pull.unsubscribe()
    async with h.worker() as worker:
        if not redelivered:
            # a first delivery (say a publisher retry outside the dedup window): the transaction
            # refuses the event
            await h.publish(event, msg_id=f"{event['event_id']}-retry")
        await wait_for(lambda: _outcome(worker, "duplicate", 1), what="duplicate outcome")
        await wait_for(lambda: _settled(h), what="consumer drained")
    (announced,) = await h.extracted()
    assert str(announced.event_id) == event["event_id"]
    assert (str(announced.user_id), str(announced.channel_id)) == (event["user_id"], event["channel_id"])
    assert sorted((m.id, m.action, m.scope, m.key) for m in announced.memories) == sorted(
        (w.id, w.action, w.scope, w.key) for w in committed.written
    )
    assert await h.dlq() == []
    assert await h.processed() == 1
    assert h.fake.counters["chat"] == calls + (0 if redelivered else 1)


async def test_a_duplicate_delivery_announces_nothing_twice(harness: Harness) -> None:
    h = harness
    event = conversation("I live in Porto and I work as a nurse.", "Nice.")
    async with h.worker() as worker:
        publishes = 0
        publish_extracted = worker.publisher.extracted

        async def counting(*args: Any) -> None:
            nonlocal publishes
            publishes += 1
            await publish_extracted(*args)

        worker.publisher.extracted = counting  # type: ignore[method-assign]
        await h.publish(event)
        await wait_for(lambda: _extracted_count(h, 1), what="memory.extracted")
        await h.publish(event, msg_id=f"{event['event_id']}-again")  # same event, new message
        await wait_for(lambda: _outcome(worker, "duplicate", 1), what="duplicate outcome")
        await wait_for(lambda: _settled(h), what="consumer drained")
    assert publishes == 2  # announced again on the duplicate, and JetStream dropped that copy
    (announced,) = await h.extracted()
    assert str(announced.event_id) == event["event_id"] and len(announced.memories) == 2
    assert await h.dlq() == []


async def test_rate_limit_with_retry_after_then_success(harness: Harness) -> None:
    h = harness
    # Retry-After 1 s is above the extractor's in-process cap (0.5 s in tests), so the worker nacks
    # the event with that delay and JetStream redelivers it.
    h.fake.script_chat(Reply.rate_limited(retry_after_s=1))
    async with h.worker() as worker:
        await h.publish(conversation("I'm vegan.", "Ok."))
        await processed_at_least(h, 1)
        assert await _value(worker, "pmem_retries_total", reason="llm") == 1
    chats = [r for r in h.fake.requests if r.path.endswith("/chat/completions")]
    assert [r.status for r in chats] == [429, 200]
    assert chats[1].received_at - chats[0].received_at >= 0.95  # Retry-After honoured
    assert await h.count("SELECT count(*) FROM memories") == 1
    assert await h.dlq() == []


async def test_server_errors_until_the_delivery_limit_go_to_the_dlq(harness: Harness) -> None:
    h = harness
    h.fake.script_chat(*[Reply.server_error(500)] * 20)
    event = conversation("I live in Madrid.", "Ok.")
    async with h.worker(max_deliver=3) as worker:
        await h.publish(event)
        await dlq_at_least(h, 1)
        assert await _value(worker, "pmem_dlq_total", reason="llm_exhausted") == 1
        assert await _value(worker, "pmem_retries_total", reason="llm") == 2
    (entry,) = await h.dlq()
    assert entry.record.kind == "llm_exhausted"
    assert entry.record.delivery_count == 3
    assert "HTTP 500" in entry.headers[DLQ_REASON_HEADER] and "HTTP 500" in entry.record.reason
    assert json.loads(entry.record.original_body()) == event
    assert h.fake.counters["chat"] == 3 * 2  # 3 deliveries x (1 try + 1 in-process retry)
    assert await h.count("SELECT count(*) FROM memories") == 0
    assert await h.processed() == 0
    assert await h.consumer_state() == (0, 0)  # terminated, not left pending


async def test_malformed_llm_json_is_retried_then_dead_lettered(harness: Harness) -> None:
    h = harness
    h.fake.script_chat(*[Reply.malformed()] * 20)
    async with h.worker():
        await h.publish(conversation("I'm from Oslo.", "Ok."))
        await dlq_at_least(h, 1)
    (entry,) = await h.dlq()
    assert entry.record.kind == "llm_permanent"
    assert "malformed" in entry.record.reason.lower() or "json" in entry.record.reason.lower()
    assert h.fake.counters["chat"] >= 2  # re-asked before giving up
    assert await h.count("SELECT count(*) FROM memories") == 0


async def test_forbidden_scope_and_overlong_key_are_rejected(harness: Harness) -> None:
    h = harness
    h.fake.set_extraction(
        {
            "memories": [
                {"key": "diet preference", "value": "Is vegetarian", "confidence": 0.9, "scope": "user"},
                {"key": "refund policy", "value": "30 days", "confidence": 0.9, "scope": "persona"},
                {"key": " ".join(["word"] * 200), "value": "long", "confidence": 0.9, "scope": "user"},
                {
                    "key": "owner hack",
                    "value": "x",
                    "confidence": 0.9,
                    "scope": "user",
                    "owner_id": str(uuid.uuid4()),
                },
            ]
        }
    )
    user = uuid.uuid4()
    async with h.worker() as worker:
        await h.publish(conversation("I'm vegetarian.", "Ok.", user_id=user))
        await processed_at_least(h, 1)
        assert await _value(worker, "pmem_candidates_dropped_total", reason="scope_not_allowed") == 1
        assert await _value(worker, "pmem_candidates_dropped_total", reason="key_too_many_words") == 1
    got = await rows(h)
    assert {(r[0], r[1]) for r in got} <= {("user", user)}  # the worker, not the LLM, chose owners
    assert "diet preference" in {r[3] for r in got}
    assert all(r[0] != "persona" and len(r[3].split()) <= 6 for r in got)


async def test_invalid_events_go_to_the_dlq_at_once_and_the_worker_keeps_consuming(harness: Harness) -> None:
    h = harness
    good = conversation("I work at Acme.", "Ok.")
    missing = conversation("hi")
    del missing["user_id"]
    bad_bodies = {
        "invalid_not_json": b"{this is not json",
        "invalid_schema": json.dumps(missing).encode(),
        "invalid_empty": json.dumps(conversation("   ")).encode(),
        "invalid_oversized": json.dumps(conversation("x" * 30_000)).encode(),
    }
    wrong_types = conversation("hi")
    wrong_types["channel_id"] = 12345
    async with h.worker() as worker:
        for body in bad_bodies.values():
            await h.publish(body, msg_id=None)
        await h.publish(json.dumps(wrong_types).encode(), msg_id=None)
        await h.publish(json.dumps(conversation()).encode(), msg_id=None)  # "messages": []
        await h.publish(good)
        await dlq_at_least(h, 6)
        await processed_at_least(h, 1)
        assert await _value(worker, "pmem_events_total", outcome="dlq") == 6
    entries = await h.dlq()
    kinds = sorted(e.record.kind for e in entries)
    assert kinds == sorted([*bad_bodies, "invalid_schema", "invalid_schema"])
    assert all(e.record.delivery_count == 1 for e in entries)  # never retried
    assert all(e.headers[DLQ_REASON_HEADER] for e in entries)
    assert {e.record.original_body() for e in entries} >= set(bad_bodies.values())
    # only the good event produced rows, and it reached the LLM alone
    assert {r[6] for r in await rows(h)} == {uuid.UUID(good["channel_id"])}
    assert h.fake.counters["chat"] == 1
    assert await h.consumer_state() == (0, 0)


async def test_secrets_never_reach_the_tables(harness: Harness) -> None:
    h = harness
    password, api_key = "hunter2-Xy9!", "sk-proj-AbCdEf0123456789AbCdEf0123456789"
    # an LLM that (wrongly) echoes the secrets back as memories
    h.fake.set_extraction(
        {
            "memories": [
                {"key": "password", "value": password, "confidence": 0.9, "scope": "user"},
                {"key": "api key", "value": api_key, "confidence": 0.9, "scope": "user"},
                {
                    "key": "home location",
                    "value": f"Lives in Porto. My password is {password}",
                    "confidence": 0.9,
                    "scope": "user",
                },
                {"key": "job title", "value": "Works as a pilot", "confidence": 0.9, "scope": "user"},
            ]
        }
    )
    event = conversation(f"My password is {password} and my API key is {api_key}. I work as a pilot.", "Ok.")
    async with h.worker():
        await h.publish(event)
        await processed_at_least(h, 1)
    everything = memory_values(await h.sql("SELECT key, value FROM memories"))
    everything += memory_values(await h.sql("SELECT old_value, new_value, key FROM memory_audit"))
    everything += memory_values(await h.sql("SELECT old_value, new_value FROM memory_revisions"))
    assert "job title" in everything
    assert not [v for v in everything if password in v or api_key in v or "hunter2" in v]
    # and the transcript sent to the LLM was redacted too
    sent = json.dumps(h.fake.chat_requests())
    assert password not in sent and api_key not in sent


async def test_concurrency_is_exactly_the_configured_number(harness: Harness) -> None:
    h = harness
    h.fake.chat_latency_s = 0.4
    async with h.worker(concurrency=4) as worker:
        for i in range(12):
            await h.publish(conversation(f"I live in City{i}.", "Ok."))
        await processed_at_least(h, 12)

        async def none_in_flight() -> bool:
            # the processed row commits before the event is acked and leaves the gauge
            return await _value(worker, "pmem_events_in_flight") == 0

        await wait_for(none_in_flight, what="no event in flight")
    # overlapped, never more than configured: the fake LLM saw exactly 4 calls at once
    assert h.fake.counters["max_in_flight"] == 4


async def test_in_progress_acks_keep_a_slow_llm_call_from_being_redelivered(harness: Harness) -> None:
    h = harness
    h.fake.chat_latency_s = 2.5  # much longer than ack_wait
    async with h.worker(ack_wait_s=1.0) as worker:
        await h.publish(conversation("I'm from Lima.", "Ok."))
        await processed_at_least(h, 1)
        # without in-progress acks the server would have redelivered it after 1 s, while the 2.5 s
        # call was still running: the consumer delivered it exactly once
        info = await h.nc.jsm().consumer_info(h.base["stream"], h.base["durable"])
        assert info.delivered.consumer_seq == 1 and (info.num_redelivered or 0) == 0
        assert await _value(worker, "pmem_events_total", outcome="duplicate") == 0
    assert h.fake.counters["chat"] == 1


async def test_graceful_shutdown_finishes_in_flight_events(harness: Harness) -> None:
    h = harness
    h.fake.chat_latency_s = 1.0
    async with h.worker(concurrency=4) as worker:
        for i in range(4):
            await h.publish(conversation(f"I live in Town{i}.", "Ok."))

        async def all_in_flight() -> bool:
            return await _value(worker, "pmem_events_in_flight") == 4

        await wait_for(all_in_flight, what="4 events in flight")
        # leaving the block stops the worker while the 4 LLM calls are still running
    assert await h.processed() == 4
    assert await h.consumer_state() == (0, 0)  # all acked, nothing left for redelivery
    assert h.fake.counters["chat"] == 4


async def test_warns_when_the_existing_consumer_differs(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    h = harness
    async with h.worker():
        pass  # creates stream and consumer with the configured values
    jsm = h.nc.jsm()
    await jsm.delete_consumer(h.base["stream"], h.base["durable"])
    await jsm.add_consumer(
        h.base["stream"],
        ConsumerConfig(
            durable_name=h.base["durable"],
            ack_policy=AckPolicy.EXPLICIT,
            ack_wait=120,
            max_deliver=9,
            filter_subject=h.base["subject"],
        ),
    )
    with caplog.at_level(logging.WARNING, logger="pmem.worker"):
        async with h.worker():
            pass
    warnings = [r for r in caplog.records if "DIFFERENT configuration" in r.getMessage()]
    assert len(warnings) == 1
    text = warnings[0].getMessage()
    assert "ack_wait" in text and "max_deliver" in text and "120" in text


# -- helpers ----------------------------------------------------------------------------------------


def _persona_answer(body: dict[str, Any]) -> str:
    # answers with every scope the request allows (the schema's enum), like an eager LLM
    text = json.dumps(body)
    items = [{"key": "refund window", "value": "Refunds take 30 days", "confidence": 0.9, "scope": "persona"}]
    items.append(
        {
            "key": "asks about refunds",
            "value": "Asked about refunds",
            "confidence": 0.9,
            "scope": "persona_user",
        }
    )
    return json.dumps({"memories": items if '"persona"' in text else items[1:]})


async def _extracted_count(h: Harness, n: int) -> bool:
    return len(await h.extracted()) >= n


async def _settled(h: Harness) -> bool:
    return await h.consumer_state() == (0, 0)


async def _outcome(worker: Any, outcome: str, n: int) -> bool:
    return await _value(worker, "pmem_events_total", outcome=outcome) >= n


async def _value(worker: Any, name: str, **labels: str) -> float:
    """A sample as Prometheus would scrape it: from the worker's /metrics (0 when absent)."""
    status, body = await http_get(worker.health.port, "/metrics")
    assert status == 200
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return float(sample.value)
    return 0.0
