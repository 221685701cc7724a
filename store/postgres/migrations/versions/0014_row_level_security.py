"""Row-level security: the team boundary held by Postgres itself.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-06

Every table that holds a team's data gets a policy keyed on the transaction-local setting
`pmem.teams`, which the store sets in each transaction from the caller's authenticated teams
(`store.team_scope`): a comma-separated list of team UUIDs, or `*` for the audited platform scope.
Unset or empty, a session sees only rows of no team. Tables with a `team_id` column are found in
the catalogue, so one added before this revision is covered too; `memory_revisions` follows its
memory, `memory_settings` and `directory` their team rows.

The product connects as `pmem_app` (created here when missing, without LOGIN): it owns no table,
so the policies apply to it; the tables' owner (who runs `pmem migrate`) and superusers bypass
them. Keys, sessions, processed events and the embedding record carry no team and stay readable:
credentials are looked up before any team is known.
"""

from __future__ import annotations

from alembic import op
from sqlalchemy import text

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | None = None
depends_on: str | None = None

APP_ROLE = "pmem_app"
POLICY = "pmem_team_boundary"

# the scope is read once per statement (an InitPlan), not once per row
_VISIBLE = "{col} IS NULL OR (SELECT pmem_scope_all()) OR {col} = ANY ((SELECT pmem_scope_teams())::uuid[])"
_EXPRESSIONS = {
    "memory_revisions": "EXISTS (SELECT 1 FROM memories m WHERE m.id = memory_revisions.memory_id)",
    "memory_settings": "level <> 'team' OR " + _VISIBLE.format(col="target_id"),
    "directory": "kind <> 'team' OR " + _VISIBLE.format(col="id"),
}

_FUNCTIONS = """
CREATE OR REPLACE FUNCTION pmem_scope_all() RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE
AS $$ SELECT coalesce(current_setting('pmem.teams', true), '') = '*' $$;

CREATE OR REPLACE FUNCTION pmem_scope_teams() RETURNS uuid[]
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
  SELECT CASE WHEN coalesce(current_setting('pmem.teams', true), '') IN ('', '*') THEN '{}'::uuid[]
              ELSE string_to_array(current_setting('pmem.teams', true), ',')::uuid[] END
$$;
"""

# roles are cluster-wide: another database's migration may create it at the same moment
_CREATE_ROLE = f"""
DO $$
BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{APP_ROLE}') THEN
    CREATE ROLE {APP_ROLE} NOLOGIN;
  END IF;
EXCEPTION WHEN duplicate_object OR unique_violation THEN
  NULL;
END $$;
"""

# tables a later revision creates are granted too (default privileges of the migrating role)
_GRANTS = """
GRANT USAGE ON SCHEMA {schema} TO {role};
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema} TO {role};
GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA {schema} TO {role};
ALTER DEFAULT PRIVILEGES IN SCHEMA {schema} GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO {role};
ALTER DEFAULT PRIVILEGES IN SCHEMA {schema} GRANT USAGE, SELECT ON SEQUENCES TO {role};
"""
_REVOKES = """
ALTER DEFAULT PRIVILEGES IN SCHEMA {schema} REVOKE SELECT, INSERT, UPDATE, DELETE ON TABLES FROM {role};
ALTER DEFAULT PRIVILEGES IN SCHEMA {schema} REVOKE USAGE, SELECT ON SEQUENCES FROM {role};
REVOKE SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema} FROM {role};
REVOKE USAGE, SELECT ON ALL SEQUENCES IN SCHEMA {schema} FROM {role};
REVOKE USAGE ON SCHEMA {schema} FROM {role};
"""


def current_schema() -> str:
    """The schema the tables live in, quoted as an identifier."""
    return str(op.get_bind().execute(text("SELECT quote_ident(current_schema())")).scalar_one())


def team_tables() -> list[str]:
    """The tables of the current schema with a `team_id` column."""
    rows = op.get_bind().execute(
        text(
            "SELECT c.table_name FROM information_schema.columns c "
            "JOIN information_schema.tables t USING (table_schema, table_name) "
            "WHERE c.table_schema = current_schema() AND c.column_name = 'team_id' "
            "AND t.table_type = 'BASE TABLE' ORDER BY c.table_name"
        )
    )
    return [str(row[0]) for row in rows]


def policies() -> dict[str, str]:
    """Each guarded table and its policy's expression."""
    guarded = {table: _VISIBLE.format(col="team_id") for table in team_tables()}
    guarded.update(_EXPRESSIONS)
    return guarded


def upgrade() -> None:
    op.execute(_FUNCTIONS)
    op.execute(_CREATE_ROLE)
    op.execute(_GRANTS.format(schema=current_schema(), role=APP_ROLE))
    for table, expression in policies().items():
        op.execute(f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY")
        op.execute(f"DROP POLICY IF EXISTS {POLICY} ON {table}")
        op.execute(
            f"CREATE POLICY {POLICY} ON {table} FOR ALL USING ({expression}) WITH CHECK ({expression})"
        )


def downgrade() -> None:
    for table in policies():
        op.execute(f"DROP POLICY IF EXISTS {POLICY} ON {table}")
        op.execute(f"ALTER TABLE {table} DISABLE ROW LEVEL SECURITY")
    op.execute(_REVOKES.format(schema=current_schema(), role=APP_ROLE))
    op.execute("DROP FUNCTION IF EXISTS pmem_scope_teams()")
    op.execute("DROP FUNCTION IF EXISTS pmem_scope_all()")
