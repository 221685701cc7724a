"""The role the tests' Postgres stores take: every Postgres test runs the product as it is
deployed, its sessions `SET ROLE pmem_app` (a role that owns no table), so row-level security holds
the team boundary under each of them. The session fixture `database_role` (tests/conftest.py) sets
`PMEM_DATABASE_ROLE` for what opens a store from the environment, in process or in a subprocess."""

from __future__ import annotations

import os

DATABASE_ROLE = "pmem_app"


def clean_environment(stripped: str | tuple[str, ...] = ("PMEM_", "OPENAI_")) -> dict[str, str]:
    """This process's environment for a `pmem` subprocess: without the variables starting with
    `stripped` (the test sets its own), with `PMEM_DATABASE_ROLE`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(stripped)}
    env["PMEM_DATABASE_ROLE"] = DATABASE_ROLE
    return env
