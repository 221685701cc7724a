"""The control plane's OpenAPI document as a file, for clients generated from it
(`clients/typescript/openapi.json`):

    python -m api.openapi_document [PATH]

writes it to PATH (default: stdout). The document is built by the app itself, over a store that is
never opened: it needs no database."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from api.app import create_app
from api.auth import AuthConfig
from extraction.embeddings import HashingEmbedder
from store.sqlite.store import SqliteMemoryStore


def openapi_document() -> dict[str, Any]:
    """The OpenAPI document exactly as `pmem serve` answers it at /openapi.json."""
    with tempfile.TemporaryDirectory(prefix="pmem-openapi-") as home:
        store = SqliteMemoryStore(f"sqlite:///{home}/unused.db", HashingEmbedder(dim=8))
        app = create_app(store=store, auth=AuthConfig(jwt_secret="x" * 32), with_ui=False)
        return app.openapi()


def render(document: dict[str, Any]) -> str:
    """The document as the committed file holds it: indented JSON, keys in the app's order."""
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str]) -> int:
    """Write the document to the path given, or to stdout."""
    text = render(openapi_document())
    if argv:
        Path(argv[0]).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
