"""The fake OpenAI-compatible server lives in `bench/fake_openai.py` (the benchmarks use it too, and
bench/ does not import from tests/); the tests keep importing it from here."""

from bench.fake_openai import (
    FakeOpenAI,
    RecordedRequest,
    Reply,
    rules_responder,
)

__all__ = ["FakeOpenAI", "RecordedRequest", "Reply", "rules_responder"]
