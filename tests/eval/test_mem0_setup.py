"""The pure parts of testkit/mem0_setup.py (mem0 itself is a bench-only dependency and not
imported)."""

from __future__ import annotations

import json
from pathlib import Path

from testkit.mem0_setup import is_mem0_request, mem0_config, mem0_responder


def _mem0_body(new_messages: str) -> dict[str, object]:
    return {
        "model": "gpt-4o-mini",
        "messages": [
            {"role": "system", "content": "\n# ROLE\n\nYou are a Memory Extractor — a precise processor."},
            {
                "role": "user",
                "content": "## Summary\n\n\n## Existing Memories\n[]\n\n## New Messages\n"
                f"{new_messages}\n\n\n## Observation Date\n2026-11-29\n\n# Output:",
            },
        ],
        "response_format": {"type": "json_object"},
    }


def test_mem0_responder_answers_in_mem0s_shape() -> None:
    body = _mem0_body("user: I drink green tea.\nassistant: Nice!\nuser: I live in Oslo.")
    assert is_mem0_request(body)
    assert json.loads(mem0_responder(body)) == {
        "memory": [{"text": "I drink green tea."}, {"text": "I live in Oslo."}]
    }
    assert json.loads(mem0_responder(body, max_facts=1)) == {"memory": [{"text": "I drink green tea."}]}
    assert json.loads(mem0_responder(_mem0_body("assistant: hello"))) == {"memory": []}


def test_is_mem0_request_is_false_for_our_extraction_calls() -> None:
    ours = {
        "messages": [
            {"role": "system", "content": "Extract memories as JSON."},
            {"role": "user", "content": "x"},
        ]
    }
    assert not is_mem0_request(ours)


def test_mem0_config_is_offline_pgvector_huggingface_openai(tmp_path: Path) -> None:
    config = mem0_config(
        database_url="postgresql://postgres@/db?host=/tmp/pg",
        llm_base_url="http://127.0.0.1:9999/v1",
        work_dir=tmp_path,
        embedding_model="/models/minilm",
        max_connections=32,
    )
    store = config["vector_store"]
    assert store["provider"] == "pgvector"
    assert store["config"]["connection_string"] == "postgresql://postgres@/db?host=/tmp/pg"
    assert store["config"]["embedding_model_dims"] == 384
    assert store["config"]["maxconn"] == 32
    assert config["embedder"] == {
        "provider": "huggingface",
        "config": {"model": "/models/minilm", "embedding_dims": 384},
    }
    assert config["llm"]["config"]["openai_base_url"] == "http://127.0.0.1:9999/v1"
    assert config["history_db_path"].startswith(str(tmp_path))
