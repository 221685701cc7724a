"""Directories for the servers the tests start that run as an OS user of their own (Postgres runs
as `embedded_postgres` when the tests run as root: `cli/embedded.py`).

Not under pytest's base directory: every pytest run that starts on the machine makes
`/tmp/pytest-of-<user>` private again (mode 0700), and a Postgres running as another user below it
then loses its own data directory ("Permission denied") halfway through the first run."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# what the server's user needs of every directory on the way to its data: to look up names in it
TRAVERSABLE = 0o755


@contextmanager
def server_directory(prefix: str) -> Iterator[Path]:
    """A new directory of its own under the system temp directory (`prefix` starts its name), one
    the servers' OS user can traverse; removed with everything in it on the way out, failed or not
    (stop the servers in it first)."""
    root = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        root.chmod(TRAVERSABLE)
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)
