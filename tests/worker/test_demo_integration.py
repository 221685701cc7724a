"""What `pmem demo --keep-running` prints for an integrator: its ports, who is who, export lines a
shell reads back as printed, and a `pmem` that runs from anywhere."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest

from cli.commands.demo_integration import (
    Cast,
    Credentials,
    DemoPorts,
    Integration,
    cast_of,
    demo_credentials,
    demo_ports,
    export_line,
    integration_env,
    integration_text,
    parse_export_line,
    pmem_path,
    read_credentials,
    refuse_taken_ports,
    write_credentials,
)
from cli.commands.errors import UsageError
from cli.embedded import free_port

SAMPLES = Path(__file__).resolve().parents[2] / "cli" / "samples"


def test_ports_default_to_what_pmem_reaches_unconfigured_and_flags_win_over_variables() -> None:
    assert demo_ports(nats_port=None, api_port=None, environ={}) == DemoPorts(nats=4222, api=8080)
    environ = {"PMEM_DEMO_NATS_PORT": "14222", "PMEM_API_PORT": "18080"}
    assert demo_ports(nats_port=None, api_port=None, environ=environ) == DemoPorts(nats=14222, api=18080)
    assert demo_ports(nats_port=5000, api_port=5001, environ=environ) == DemoPorts(nats=5000, api=5001)


@pytest.mark.parametrize(
    ("nats", "api", "environ", "message"),
    [
        (None, None, {"PMEM_API_PORT": "http"}, "PMEM_API_PORT is 'http', not a port"),
        (70000, None, {}, "--nats-port is '70000', not a port"),
        (5000, 5000, {}, "nats-server and the API cannot share port 5000"),
    ],
)
def test_a_port_that_cannot_work_is_refused_naming_where_it_came_from(
    nats: int | None, api: int | None, environ: dict[str, str], message: str
) -> None:
    with pytest.raises(UsageError, match=message):
        demo_ports(nats_port=nats, api_port=api, environ=environ)


def test_a_taken_port_is_refused_in_one_line_naming_the_flag_and_the_variable() -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        with pytest.raises(UsageError) as refused:
            refuse_taken_ports(DemoPorts(nats=free_port(), api=taken))
    message = str(refused.value)
    assert message == (
        f"port {taken} (the API and web UI) is in use on 127.0.0.1; stop what listens there, or pass "
        "--port (or set PMEM_API_PORT) with another port"
    )
    with pytest.raises(UsageError, match=r"port 4222 \(nats-server\).*--nats-port.*PMEM_DEMO_NATS_PORT"):
        refuse_taken_ports(DemoPorts(nats=4222, api=8080), is_free=lambda _host, port: port != 4222)
    refuse_taken_ports(DemoPorts(nats=4222, api=8080), is_free=lambda _host, _port: True)


def test_every_id_in_the_sample_conversations_has_a_name() -> None:
    events = [json.loads(line) for line in (SAMPLES / "conversations.jsonl").read_text().splitlines()]
    cast = cast_of(events)
    for event in events:
        assert event["user_id"] in cast.users and event["team_id"] in cast.teams
        assert event["persona_id"] is None or event["persona_id"] in cast.personas
    catalogue = json.loads((SAMPLES / "names.json").read_text())
    assert cast.name(catalogue["user"]) == "Alice Martin"
    assert cast.name(catalogue["persona"]) == "Chef"
    assert cast.name(catalogue["team"]) == "Acme"
    assert cast.name("not-named") == "not-named"


def test_pmem_path_prefers_the_running_script_then_the_one_beside_python(tmp_path: Path) -> None:
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "pmem").write_text("#!/bin/sh\n")
    python = str(bin_dir / "python")
    assert pmem_path(str(bin_dir / "pmem"), "/usr/bin/python3") == str(bin_dir / "pmem")
    assert pmem_path("/somewhere/cli/main.py", python, which=lambda _: None) == str(bin_dir / "pmem")
    assert pmem_path("-c", "/nowhere/python", which=lambda _: "/usr/local/bin/pmem") == "/usr/local/bin/pmem"
    assert pmem_path("-c", "/no where/python", which=lambda _: None) == "'/no where/python' -m cli.main"


def test_a_shell_reads_an_export_line_back_as_given() -> None:
    variables = [
        ("PMEM_DATABASE_URL", "postgresql://postgres:@/pmem?host=/tmp/a dir/pg"),
        ("PMEM_AUTH_JWT_SECRET", "a'b\"c$d`e"),
        ("PMEM_URL", "http://127.0.0.1:8080"),
    ]
    line = export_line(variables)
    assert parse_export_line(line) == dict(variables)
    script = line + '\nprintf "%s\\n" "$PMEM_DATABASE_URL" "$PMEM_AUTH_JWT_SECRET" "$PMEM_URL"'
    shell = subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=True)
    assert shell.stdout.splitlines() == [value for _, value in variables]


def integration(**overrides: object) -> Integration:
    values: dict[str, object] = {
        "base_url": "http://127.0.0.1:8080",
        "nats_url": "nats://127.0.0.1:4222",
        "database_url": "postgresql://postgres:@/pmem?host=/data/pg",
        "embedding": [("PMEM_EMBEDDING_PROVIDER", "hashing")],
        "jwt_secret": "s3cret",
        "api_key": "pmem_sk_abc",
        "cast": Cast(teams={"t1": "Acme"}, personas={"p1": "Chef"}, users={"u1": "Alice Martin"}),
        "user_id": "u1",
        "persona_id": "p1",
        "team_id": "t1",
        "pmem": "/venv/bin/pmem",
        "python": "/venv/bin/python",
        "sign_in": [("admin", "http://127.0.0.1:8080/ui/login?token=x", "Priya Raman: every team")],
        "examples": Path("/repo/examples"),
    }
    return Integration(**{**values, **overrides})  # type: ignore[arg-type]


def test_the_printed_export_lines_set_every_variable_of_the_integration() -> None:
    text = integration_text(integration())
    exported: dict[str, str] = {}
    for line in text:
        if line.strip().startswith("export "):
            exported.update(parse_export_line(line.strip()))
    expected = dict(pair for group in integration_env(integration()) for pair in group)
    assert exported == expected
    assert exported["PMEM_USER_ID"] == "u1" and exported["PMEM_API_KEY"] == "pmem_sk_abc"
    assert "  team     t1  Acme" in text and "  user     u1  Alice Martin" in text
    assert any("Alice Martin, talking with Chef, in Acme" in line for line in text)
    assert "  /venv/bin/python /repo/examples/publish_event.py" in text
    assert any(line.startswith("  /venv/bin/pmem recall --user-id") for line in text)
    assert any("Priya Raman: every team" in line for line in text)


def test_without_the_ui_or_the_examples_neither_is_promised() -> None:
    text = "\n".join(integration_text(integration(with_ui=False, sign_in=(), examples=None)))
    assert "web UI       off (--no-ui)" in text
    assert "/ui/login" not in text and "examples/" not in text


def test_credentials_are_kept_for_this_user_only(tmp_path: Path) -> None:
    assert read_credentials(tmp_path) is None
    write_credentials(tmp_path, Credentials(jwt_secret="s", api_key="pmem_sk_k"))
    assert read_credentials(tmp_path) == Credentials(jwt_secret="s", api_key="pmem_sk_k")
    assert (tmp_path / "credentials.json").stat().st_mode & 0o777 == 0o600
    (tmp_path / "credentials.json").write_text("{broken")
    assert read_credentials(tmp_path) is None


def test_a_demo_refuses_a_taken_port_before_starting_anything(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "cli.main", "demo", "--keep-running", "--data-dir", str(tmp_path / "d")],
            env={"PATH": "/usr/bin:/bin", "PMEM_DEMO_NATS_PORT": str(taken), "PMEM_API_PORT": "1"},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert done.returncode == 2
    assert done.stderr == (
        f"pmem demo: port {taken} (nats-server) is in use on 127.0.0.1; stop what listens there, or pass "
        "--nats-port (or set PMEM_DEMO_NATS_PORT) with another port\n"
    )
    assert not (tmp_path / "d" / "nats").exists() and not (tmp_path / "d" / "postgres").exists()


class KeyTable:
    """The API-key half of a store, in memory: active keys by name."""

    def __init__(self) -> None:
        self.active: dict[str, str] = {}
        self.created = 0

    async def verify_api_key(self, key: str) -> object | None:
        return object() if key in self.active.values() else None

    async def revoke_api_key(self, name: str) -> bool:
        return self.active.pop(name, None) is not None

    async def create_api_key(self, name: str) -> tuple[object, str]:
        assert name not in self.active, "an active key of that name exists"
        self.created += 1
        self.active[name] = f"pmem_sk_{self.created}"
        return object(), self.active[name]


async def test_a_restarted_demo_keeps_its_key_and_secret_while_the_key_is_active(tmp_path: Path) -> None:
    keys = KeyTable()
    first = await demo_credentials(keys, tmp_path)
    assert await demo_credentials(keys, tmp_path) == first  # pasted lines stay valid
    assert keys.created == 1
    await keys.revoke_api_key("pmem-demo")  # revoked by hand, or another database
    again = await demo_credentials(keys, tmp_path)
    assert again.api_key != first.api_key and again.jwt_secret == first.jwt_secret
    assert read_credentials(tmp_path) == again


def test_a_data_directory_keeps_the_embedder_of_its_first_run(tmp_path: Path) -> None:
    from cli.commands.demo import choose_embedding_provider, remember_embedding, remembered_embedding

    assert remembered_embedding(tmp_path) is None
    first, _ = choose_embedding_provider(configured=None, remembered=None, local_installed=False)
    remember_embedding(tmp_path, first)
    # local installed since: the restart keeps the first run's database (and the key in it)
    again, why = choose_embedding_provider(
        configured=None, remembered=remembered_embedding(tmp_path), local_installed=True
    )
    assert (first, again) == ("hashing", "hashing") and "first run" in why
    chosen, _ = choose_embedding_provider(configured="local", remembered="hashing", local_installed=True)
    assert chosen == "local"  # PMEM_EMBEDDING_PROVIDER still decides
    assert choose_embedding_provider(configured=None, remembered=None, local_installed=True)[0] == "local"


def test_a_kept_running_demo_prints_a_line_per_event() -> None:
    from cli.commands.demo_integration import dead_letter_line, extracted_line
    from worker.events import DeadLetter

    user, persona, event_id = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    cast = Cast(users={str(user): "Alice"}, personas={str(persona): "Chef"}, teams={})
    extracted = json.dumps(
        {
            "event_id": str(event_id),
            "channel_id": str(uuid.uuid4()),
            "user_id": str(user),
            "persona_id": str(persona),
            "memories": [
                {"id": str(uuid.uuid4()), "action": "created", "scope": "persona_user", "key": "diet"}
            ],
        }
    ).encode()
    assert extracted_line(extracted, cast) == (
        f"event {event_id} processed (Alice with Chef): persona_user diet (created)"
    )
    dead = DeadLetter.for_body(
        b"{}",
        reason="invalid event:\n no id",
        kind="invalid_schema",
        subject="s",
        delivery_count=1,
        failed_at=datetime.now(UTC),
    ).encode()
    assert dead_letter_line(dead).startswith(
        "event sha256:"
    ) and "(invalid_schema): invalid event: no id" in dead_letter_line(dead)
