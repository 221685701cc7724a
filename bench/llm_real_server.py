"""Seconds per extraction call against a real llama.cpp server, and the model's real replies.

Runs the real `LLMExtractor` over `pmem demo`'s sample conversations (and, with `--locomo`, over
every session of one LoCoMo conversation, speaker A as the user) against `llama-server` serving
SmolLM2-135M-Instruct on loopback (started here; or `--base-url` for a running server), and writes:

- `--replies FILE` (JSONL, one line per request): the transcript, every call's raw reply content,
  finish reason, tokens and seconds, and the parsed result (candidates and rejections) or the
  classified error. Replies to LoCoMo text are derived from CC BY-NC data: keep them out of git.
- `--out FILE` (JSON): seconds per call and per request (p50 / mean / max), calls per request,
  outcome counts. No conversation text.

    .venv/bin/python bench/llm_real_server.py --out bench/results/llm_real_server_smollm2.json \\
        --replies /tmp/replies_demo.jsonl
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from extraction.clients import ProviderClient, sdk_client
from extraction.errors import PmemProviderError, RetryPolicy
from extraction.llm import LLMConfig, LLMExtractor
from extraction.types import ExtractionRequest, TranscriptMessage
from store.model import Scope
from testkit.llama_server import LlamaServer, find_llama_server, find_model

SAMPLES = Path(__file__).resolve().parents[1] / "cli" / "samples" / "conversations.jsonl"


class RecordingClient(ProviderClient):
    """A `ProviderClient` that keeps every chat reply's raw body and its wall-clock seconds."""

    def __init__(self, *, base_url: str, timeout_s: float) -> None:
        super().__init__(
            lambda: sdk_client(base_url=base_url, api_key="unused", timeout_s=timeout_s), timeout_s=timeout_s
        )
        self.calls: list[dict[str, Any]] = []

    async def post(self, path: str, body: dict[str, Any], *, timeout_s: float | None = None) -> bytes:
        """POST as the parent does, recording (seconds, status, reply) of each attempt."""
        started = time.perf_counter()
        try:
            reply = await super().post(path, body, timeout_s=timeout_s)
        except Exception as exc:
            self.calls.append(
                {"seconds": time.perf_counter() - started, "error": f"{type(exc).__name__}: {exc}"[:300]}
            )
            raise
        seconds = time.perf_counter() - started
        data = json.loads(reply)
        choice = (data.get("choices") or [{}])[0]
        usage = data.get("usage") or {}
        self.calls.append(
            {
                "seconds": seconds,
                "max_tokens": body.get("max_tokens", body.get("max_completion_tokens")),
                "finish_reason": choice.get("finish_reason"),
                "content": (choice.get("message") or {}).get("content"),
                "prompt_tokens": usage.get("prompt_tokens"),
                "completion_tokens": usage.get("completion_tokens"),
            }
        )
        return reply


def demo_requests() -> list[tuple[str, ExtractionRequest]]:
    """`pmem demo`'s conversations with the scopes the worker allows them."""
    found = []
    for index, line in enumerate(SAMPLES.read_text().splitlines()):
        event = json.loads(line)
        scopes: tuple[Scope, ...] = ("user",) if event["persona_id"] is None else ("user", "persona_user")
        messages = tuple(TranscriptMessage(role=m["role"], content=m["content"]) for m in event["messages"])
        found.append((f"demo/{index}", ExtractionRequest(messages=messages, allowed_scopes=scopes)))
    return found


def locomo_requests(path: Path, conversation: int) -> list[tuple[str, ExtractionRequest]]:
    """One request per session of LoCoMo conversation `conversation`; speaker A is the user."""
    data = json.loads(path.read_text())[conversation]["conversation"]
    speaker_a = data["speaker_a"]
    found = []
    number = 1
    while f"session_{number}" in data:
        turns = data[f"session_{number}"]
        messages = tuple(
            TranscriptMessage(role="user" if t["speaker"] == speaker_a else "assistant", content=t["text"])
            for t in turns
            if t.get("text")
        )
        found.append(
            (
                f"locomo/{conversation}/session_{number}",
                ExtractionRequest(messages=messages, allowed_scopes=("user",)),
            )
        )
        number += 1
    return found


async def run(args: argparse.Namespace, base_url: str, context: int) -> dict[str, Any]:
    """Extract every request once; write the replies file; return the timing summary."""
    client = RecordingClient(base_url=base_url, timeout_s=args.timeout)
    config = LLMConfig(
        model="smollm2",
        base_url=base_url,
        timeout_s=args.timeout,
        retry=RetryPolicy(max_retries=2, wait_initial_s=0.2, wait_max_s=1.0),
        max_output_tokens=args.max_output_tokens,
        max_input_tokens=context - args.max_output_tokens,
        temperature=args.temperature,
    )
    llm = LLMExtractor(config, client=client)
    requests = demo_requests()
    if args.locomo:
        requests = locomo_requests(args.locomo, args.conversation)
    per_request: list[float] = []
    outcomes: dict[str, int] = {}
    calls_per_request: list[int] = []
    lines = []
    for done, (name, request) in enumerate(requests, 1):
        first = len(client.calls)
        started = time.perf_counter()
        record: dict[str, Any] = {
            "request": name,
            "scopes": list(request.allowed_scopes),
            "messages": [{"role": m.role, "content": m.content} for m in request.messages],
        }
        try:
            result = await llm.extract(request)
        except PmemProviderError as exc:
            kind = type(exc).__name__
            record["error"] = {"kind": kind, "message": str(exc)}
        else:
            kind = "ok"
            record["candidates"] = [
                {"key": c.key, "value": c.value, "confidence": c.confidence, "scope": c.scope}
                for c in result.candidates
            ]
            record["rejected"] = [{"code": r.code, "reason": r.reason} for r in result.rejected]
        per_request.append(time.perf_counter() - started)
        record["calls"] = client.calls[first:]
        calls_per_request.append(len(record["calls"]))
        outcomes[kind] = outcomes.get(kind, 0) + 1
        lines.append(json.dumps(record, ensure_ascii=False))
        print(f"  {done}/{len(requests)} {name}: {kind}, {per_request[-1]:.1f} s", file=sys.stderr)
    await llm.close()
    await client.close()
    if args.replies:
        args.replies.write_text("\n".join(lines) + "\n")
    seconds = [c["seconds"] for c in client.calls if "error" not in c]
    completion = [c["completion_tokens"] or 0 for c in client.calls if "error" not in c]
    return {
        "requests": len(requests),
        "calls": len(client.calls),
        "outcomes": outcomes,
        "seconds_per_call": {
            "p50": statistics.median(seconds),
            "mean": statistics.fmean(seconds),
            "max": max(seconds),
        },
        "seconds_per_request": {"p50": statistics.median(per_request), "mean": statistics.fmean(per_request)},
        "completion_tokens_per_call": {"mean": statistics.fmean(completion), "max": max(completion)},
        "finish_reasons": sorted({str(c.get("finish_reason")) for c in client.calls}),
        "max_output_tokens": args.max_output_tokens,
        "temperature": args.temperature,
    }


def main() -> None:
    """Parse arguments, start the server unless `--base-url`, run, print and write the report."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--base-url", help="a running OpenAI-compatible server (default: start llama-server)")
    parser.add_argument("--context", type=int, default=4096, help="tokens of context per request")
    parser.add_argument("--max-output-tokens", type=int, default=1024)
    parser.add_argument("--temperature", type=float, default=None)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--locomo", type=Path, help="locomo10.json: its sessions instead of the demo's")
    parser.add_argument("--conversation", type=int, default=0)
    parser.add_argument("--replies", type=Path)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    server = None
    base_url = args.base_url
    if base_url is None:
        log = Path(tempfile.mkdtemp(prefix="llama-")) / "server.log"
        server = LlamaServer(
            binary=find_llama_server(),
            model=find_model(),
            log_path=log,
            ctx_size=args.context * 2,
            parallel=2,
        )
        print(f"starting {' '.join(server.command())}", file=sys.stderr)
        server.start()
        base_url = server.base_url
    try:
        report = asyncio.run(run(args, base_url, args.context))
    finally:
        if server is not None:
            server.stop()
    report["date"] = time.strftime("%Y-%m-%d")
    report["model"] = "SmolLM2-135M-Instruct.Q4_1.gguf" if args.base_url is None else "given server"
    report["source"] = "locomo" if args.locomo else "demo"
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
