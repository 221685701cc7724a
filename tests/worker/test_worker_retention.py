"""Stream retention is a privacy control: the event stream (raw transcripts) and the output stream
(DLQ records copy event bodies) are created with PMEM_STREAM_MAX_AGE / PMEM_DLQ_MAX_AGE."""

from __future__ import annotations

import logging

import pytest

from config import load_settings
from tests.worker.worker_harness import Harness
from worker.streams import ensure_stream

pytestmark = pytest.mark.asyncio


async def test_streams_are_created_with_the_configured_max_age(harness: Harness) -> None:
    h = harness
    async with h.worker(stream_max_age="2h", dlq_max_age="3d"):
        events = await h.nc.jsm().stream_info(h.base["stream"])
        output = await h.nc.jsm().stream_info(h.base["output_stream"])
    assert events.config.max_age == pytest.approx(7200)
    assert output.config.max_age == pytest.approx(3 * 86400)


async def test_retention_has_finite_defaults() -> None:
    settings = load_settings()
    assert 0 < settings.stream_max_age <= 30 * 86400
    assert 0 < settings.dlq_max_age <= 30 * 86400


async def test_an_existing_stream_with_other_retention_is_warned_about(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    h = harness
    await ensure_stream(h.nc.jsm(), h.base["stream"], [h.base["subject"]], create=True, max_age_s=0)
    with caplog.at_level(logging.WARNING, logger="pmem.worker"):
        await ensure_stream(h.nc.jsm(), h.base["stream"], [h.base["subject"]], create=True, max_age_s=3600)
    assert any("keeps messages for ever" in r.getMessage() for r in caplog.records)
