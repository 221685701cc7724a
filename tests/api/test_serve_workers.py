"""`pmem serve` with two API processes on one port (PMEM_API_WORKERS=2): both answer, `/metrics`
counts every process's requests, and SIGTERM stops them all within a deadline."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable

import httpx
import psutil

from store.migrate import migrate
from tests.api.serve_harness import DIM, ServeProcess, pmem, serve_environment


def api_processes(parent: psutil.Process) -> list[psutil.Process]:
    """The parent's spawned API processes (not multiprocessing's resource tracker)."""
    return [child for child in parent.children() if "spawn_main" in " ".join(child.cmdline())]


def recall_count(metrics: str) -> float:
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith("pmem_api_requests_total{") and 'route="/v1/recall"' in line
    )


async def test_two_api_processes_answer_and_stop_on_sigterm(new_database: Callable[[], str]) -> None:
    url = new_database()
    migrate(url, DIM)
    env = serve_environment(url)
    env["PMEM_API_WORKERS"] = "2"
    key = pmem(env, "keys", "create", "chat-backend").stdout.strip()
    process = ServeProcess(env)
    base = process.start(timeout_s=60)
    assert process.proc is not None
    parent = psutil.Process(process.proc.pid)
    try:
        for _ in range(300):  # 30 s at most
            if len(api_processes(parent)) >= 2:
                break
            await asyncio.sleep(0.1)
        workers = api_processes(parent)
        assert len(workers) == 2, process.logged()[-2000:]
        body = {"user_id": "00000000-0000-0000-0000-000000000001", "query": "anything", "limit": 5}

        async def one_recall() -> int:
            # a new connection each: the kernel spreads them over both processes
            async with httpx.AsyncClient(base_url=base, timeout=10) as http:
                response = await http.post(
                    "/v1/recall", json=body, headers={"Authorization": f"Bearer {key}"}
                )
                return response.status_code

        statuses = await asyncio.gather(*(one_recall() for _ in range(40)))
        assert set(statuses) == {200}
        async with httpx.AsyncClient(base_url=base, timeout=10) as http:
            scraped = [recall_count((await http.get("/metrics")).text) for _ in range(4)]
        assert scraped == [40.0] * 4  # the sum over both processes, whichever one answers
        assert all(worker.cpu_times().user > 0 for worker in workers)
    finally:
        process.proc.send_signal(signal.SIGTERM)
        try:
            code = process.proc.wait(timeout=20)
        finally:
            _, alive = psutil.wait_procs(workers, timeout=5)
            for leftover in alive:
                leftover.kill()
            process.stop()
    assert code == 0
    assert alive == []
