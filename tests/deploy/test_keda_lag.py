"""KEDA's nats-jetstream scaler reads `/jsz?acc=<account>&consumers=true&config=true` from the NATS
monitoring port and looks up the ScaledObject's stream and consumer there. This runs a real
nats-server with monitoring on, creates the stream and the durable consumer with the worker's own
code and the ConfigMap's settings, and checks that the ScaledObject's names find the consumer and
that its lag counts the waiting events (a miss would make KEDA fall back to the stream sequence)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import pytest

from cli.embedded import _wait_for_port, free_port, nats_server_binary
from config import load_settings
from tests.deploy.deploy_files import find_object
from worker.streams import consumer_config, ensure_stream


@pytest.fixture
def monitored_nats(tmp_path: Path) -> Iterator[tuple[str, int]]:
    """A nats-server with JetStream and the monitoring endpoint: (client URL, monitoring port)."""
    port, monitoring = free_port(), free_port()
    process = subprocess.Popen(
        [
            nats_server_binary(),
            "-js",
            "-sd",
            str(tmp_path),
            "-p",
            str(port),
            "-a",
            "127.0.0.1",
            "-m",
            str(monitoring),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_for_port(port, 15.0, process)
        _wait_for_port(monitoring, 15.0, process)
        yield f"nats://127.0.0.1:{port}", monitoring
    finally:
        process.terminate()
        process.wait(timeout=10)


def keda_lag(monitoring_port: int, *, account: str, stream: str, consumer: str) -> int | None:
    """The lag KEDA computes (num_pending + num_ack_pending of the named consumer), or None when
    the names find no consumer."""
    url = f"http://127.0.0.1:{monitoring_port}/jsz?acc={account}&consumers=true&config=true"
    with urllib.request.urlopen(url, timeout=10) as response:
        jsz: dict[str, Any] = json.loads(response.read())
    for acc in jsz.get("account_details", []):
        if acc["name"] != account:
            continue
        for detail in acc.get("stream_detail", []):
            if detail["name"] != stream:
                continue
            for info in detail.get("consumer_detail", []):
                if info["name"] == consumer:
                    return int(info["num_pending"]) + int(info["num_ack_pending"])
    return None


async def test_the_scaled_object_finds_the_worker_consumer_and_its_backlog(
    monitored_nats: tuple[str, int],
) -> None:
    url, monitoring = monitored_nats
    config = find_object("ConfigMap", "pmem-worker")["data"]
    settings = load_settings(
        nats_url=url,
        stream=config["PMEM_STREAM"],
        durable=config["PMEM_DURABLE"],
        subject=config["PMEM_SUBJECT"],
    )
    trigger = find_object("ScaledObject", "pmem-worker")["spec"]["triggers"][0]["metadata"]
    nc = await nats.connect(url)
    try:
        jsm = nc.jsm()
        await ensure_stream(jsm, settings.stream, [settings.subject], create=True)
        await jsm.add_consumer(settings.stream, config=consumer_config(settings))
        for n in range(3):
            await nc.jetstream().publish(settings.subject, json.dumps({"n": n}).encode(), timeout=10)
    finally:
        await nc.close()

    names = {"account": trigger["account"], "stream": trigger["stream"], "consumer": trigger["consumer"]}
    # the monitoring endpoint reports the consumer's state as the server last updated it: wait for it
    for _ in range(200):
        if keda_lag(monitoring, **names) == 3:
            break
        await asyncio.sleep(0.05)
    assert keda_lag(monitoring, **names) == 3
    # the check can fail: a consumer name that is not the worker's finds nothing
    assert keda_lag(monitoring, **{**names, "consumer": "pmem-workers"}) is None
