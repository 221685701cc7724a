"""Client CPU per OpenAI-compatible POST through `extraction.clients.ProviderClient` (the openai
SDK's client, raw replies), on the SDK's aiohttp transport (`openai.DefaultAioHttpClient`, what
`provider_client` uses) and on its default httpx2 transport.

The fake OpenAI-compatible server (testkit/fake_openai.py) runs in its own process, so only the
client's CPU is counted. Each round sends N embeddings requests (3 inputs, base64 reply) with 32
in flight, once per client, alternating, and reports the client process's CPU per request.

    python bench/http_client_cpu.py                 # 4 rounds of 2,000 requests
    python bench/http_client_cpu.py --requests 500 --rounds 2
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import statistics
import subprocess
import sys
import textwrap
from collections.abc import Awaitable, Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import openai  # noqa: E402

from extraction.clients import ProviderClient, provider_client  # noqa: E402

FAKE_SERVER = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, sys.argv[1])
    from testkit.fake_openai import FakeOpenAI
    fake = FakeOpenAI()
    print(fake.start(), flush=True)
    sys.stdin.read()  # until the parent closes our stdin
    fake.stop()
    """
)
BODY = {
    "model": "fake-embedding",
    "input": ["lives in Lyon", "vegetarian", "plays chess"],
    "encoding_format": "base64",
}


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def cpu_ms_per_request(post: Callable[[], Awaitable[bytes]], requests: int, in_flight: int) -> float:
    """Run `requests` posts with `in_flight` at a time; this process's CPU per request in ms."""
    slots = asyncio.Semaphore(in_flight)

    async def one() -> None:
        async with slots:
            await post()

    start = cpu_s()
    await asyncio.gather(*(one() for _ in range(requests)))
    return 1000 * (cpu_s() - start) / requests


def start_fake() -> tuple[subprocess.Popen[str], str]:
    """The fake server in its own process, and its base URL."""
    fake = subprocess.Popen(
        [sys.executable, "-c", FAKE_SERVER, str(ROOT)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert fake.stdout is not None
    return fake, fake.stdout.readline().strip()


async def main(base_url: str, requests: int, rounds: int, in_flight: int) -> None:
    clients = {
        "SDK client, aiohttp transport (ours)": provider_client(
            base_url=base_url, api_key="k", timeout_s=30, missing_key=""
        ),
        "SDK client, httpx2 transport": ProviderClient(
            lambda: openai.AsyncOpenAI(base_url=base_url, api_key="k", max_retries=0, timeout=30),
            timeout_s=30,
        ),
    }

    def poster(client: ProviderClient) -> Callable[[], Awaitable[bytes]]:
        return lambda: client.post("/embeddings", BODY)

    figures: dict[str, list[float]] = {name: [] for name in clients}
    try:
        for client in clients.values():  # warm-up: connections, imports
            await cpu_ms_per_request(poster(client), 100, in_flight)
        for round_ in range(1, rounds + 1):
            for name, client in clients.items():
                figures[name].append(await cpu_ms_per_request(poster(client), requests, in_flight))
            print(f"round {round_}/{rounds}: " + ", ".join(f"{n} {f[-1]:.2f} ms" for n, f in figures.items()))
    finally:
        for client in clients.values():
            await client.close()
    for name, values in figures.items():
        print(f"{name:40s} median {statistics.median(values):.2f} ms CPU per request ({requests} x {rounds})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--in-flight", type=int, default=32)
    options = parser.parse_args()
    fake, base_url = start_fake()
    try:
        asyncio.run(main(base_url, options.requests, options.rounds, options.in_flight))
    finally:
        assert fake.stdin is not None
        fake.stdin.close()
        fake.wait(timeout=10)
