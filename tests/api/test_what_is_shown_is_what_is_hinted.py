"""Properties over arbitrary Unicode, through the app over real Postgres:

- what an extracted memory's value is in the review API, on the reviewer's page and in the hint sent
  after approval is one and the same text, without a character a reviewer cannot see, and with
  every visible character of what the model said;
- no recall query, cursor or credential, however malformed, makes the API answer 5xx (a fuzz run
  drawing from corpora of hostile strings, in seconds)."""

from __future__ import annotations

import asyncio
import base64
import html
import json
import re
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone

import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from api.app import create_app
from api.auth import mint_jwt
from extraction.embeddings import HashingEmbedder
from extraction.validate import validate_items
from store.model import NewMemory
from store.postgres.store import PostgresMemoryStore
from store.rules.admission import has_content
from store.rules.hint import KNOWN_HEADER
from store.rules.keys import is_invisible, storable_value
from store.team_scope import platform_scope, team_scope, teams_scope
from tests.api.conftest import AUTH, DIM, SECRET, TEAM_A
from tests.database_role import DATABASE_ROLE
from tests.factories import user_fact

# characters a smuggler reaches for: tags, bidi controls, zero-width ones, variation selectors,
# fillers, controls, a lone surrogate, and whitespace of every kind
TRICKY = (
    [chr(c) for c in (0xE0001, 0xE0020, 0xE0041, 0xE007F, 0xE0100, 0xE01EF)]
    + list("\u200b\u200c\u200d\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
    + list("\u2060\u2061\u2064\ufeff\u00ad\u034f\u061c\u115f\u3164\uffa0\ufe0f\u180e\u17b4")
    + list("\x00\x07\x1b\x7f\x85\x9f\ud800\udfff")
    + list(" \t\n\r\x0b\x0c\u00a0\u1680\u2000\u2028\u2029\u3000")
)
ANY_TEXT = st.text(
    alphabet=st.one_of(st.characters(exclude_categories=()), st.sampled_from(TRICKY)),
    min_size=1,
    max_size=120,
)
KEY = "greeting style"
VALUE_RE = re.compile(r'<p class="value">(.*?)</p>', re.S)


class Served:
    """The app in process over the API tests' Postgres, with an admin signed in to the UI."""

    def __init__(self, database_url: str) -> None:
        self.runner = asyncio.Runner()
        self.store = PostgresMemoryStore(database_url, HashingEmbedder(dim=DIM), database_role=DATABASE_ROLE)
        app = create_app(store=self.store, auth=AUTH, max_body_bytes=64_000)
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        self.http = httpx.AsyncClient(transport=transport, base_url="http://pmem.test")
        self.admin = {
            "Authorization": f"Bearer {mint_jwt(secret=SECRET, subject=uuid.uuid4(), role='admin')}"
        }
        self.key = ""

    def run(self, coroutine: object) -> object:
        return self.runner.run(coroutine)  # type: ignore[arg-type]

    async def start(self) -> None:
        _, self.key = await self.store.api_keys.create_api_key(f"fuzz-{uuid.uuid4().hex[:8]}")
        sign_in = mint_jwt(secret=SECRET, subject=uuid.uuid4(), role="admin", ttl_s=300, sign_in=True)
        signed = await self.http.get("/ui/login", params={"token": sign_in})
        assert signed.status_code == 200, signed.text

    async def close(self) -> None:
        await self.http.aclose()
        await self.store.close()


@pytest.fixture(scope="module")
def served(api_db_url: str) -> Iterator[Served]:
    # the runner keeps the context of its first run: the test's own store calls are the platform's
    # (as `the_test_sees_every_team` makes them elsewhere); each request sets its own scope
    with platform_scope("test: the test's own reads and writes"):
        app = Served(api_db_url)
        app.run(app.start())
    yield app
    app.run(app.close())
    app.runner.close()


async def _shown_and_hinted(app: Served, text: str) -> None:
    candidates, rejected = validate_items(
        [{"key": KEY, "value": text, "confidence": 0.9, "scope": "persona"}], ("persona", "user")
    )
    expected = storable_value(text)
    if rejected:  # only a value without a word in it (store.rules.admission), or an over-long one
        code = "value_empty" if not has_content(expected) else "value_too_long"
        assert [r.code for r in rejected] == [code]
        return
    value = candidates[0].value
    assert value == expected
    assert not [c for c in value if is_invisible(c)]
    # nothing visible is lost: the same characters apart from how whitespace is laid out
    assert [c for c in value if not c.isspace()] == [
        c for c in text if not c.isspace() and not is_invisible(c)
    ]
    persona = uuid.uuid4()
    # written in the team's scope, as the worker writes it (this runner has no scope of its own)
    with team_scope(teams_scope([TEAM_A])):
        written = await app.store.writes.upsert(
            NewMemory(scope="persona", owner_id=persona, user_id=None, key=KEY, value=value, team_id=TEAM_A),
            actor="worker",
        )
    queue = await app.http.get("/v1/review", params={"persona_id": str(persona)}, headers=app.admin)
    assert [item["value"] for item in queue.json()["items"]] == [value]
    page = await app.http.get(f"/ui/memories/{written.memory_id}")
    assert page.status_code == 200
    (shown,) = VALUE_RE.findall(page.text)
    assert html.unescape(shown) == value
    approved = await app.http.post(f"/v1/review/{written.memory_id}/approve", headers=app.admin)
    assert approved.status_code == 200 and approved.json()["value"] == value
    hint = await app.http.post(
        "/v1/hint",
        json={"user_id": str(uuid.uuid4()), "persona_id": str(persona), "team_id": str(TEAM_A)},
        headers={"Authorization": f"Bearer {app.key}"},
    )
    assert hint.json()["hint"].splitlines() == [KNOWN_HEADER, f"- {KEY}: {value}"]


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(text=ANY_TEXT)
def test_the_review_api_the_review_page_and_the_hint_show_the_same_visible_text(
    served: Served, text: str
) -> None:
    served.run(_shown_and_hinted(served, text))


def _cursor(moment: str, item: str) -> str:
    return base64.urlsafe_b64encode(f"{moment}|{item}".encode()).decode().rstrip("=")


# Inputs a careless parser trips on, as corpora the fuzz draws from: drawing from a list costs
# Hypothesis nothing, where generating long arbitrary text (hundreds of items of hundreds of
# characters) spent half an hour building inputs before the first request.
HOSTILE = (
    "",
    " ",
    " " * 500,
    "\t,\t",
    ",,",
    "\n" * 50,
    "\x00",
    "\x00\x00select",
    "\u202e\u2066evil\u2069",
    "\ufeff",
    "\U000e0041\U000e007f",
    "\u200b\u200d",
    "%",
    "%00",
    "%s%s%n",
    "\\",
    "'",
    '"',
    "' OR '1'='1' --",
    "'); DROP TABLE memories; --",
    "$(id)",
    "{{7*7}}",
    "<script>alert(1)</script>",
    "NaN",
    "-1",
    "0",
    "1e309",
    "9" * 40,
    "-" + "9" * 40,
    "null",
    "[]",
    "{}",
    "a" * 4000,
    "word " * 900,
    "🧪" * 100,
    "İıßﬀ",
    "русский текст",
    "中文的查询",
    "|",
    "||",
    "=",
    "==",
    ".",
    "..",
    "a.b.c",
    "Bearer x",
)
TIME_WORDS = (
    "in 0000",
    "since 1900",
    "5 months ago",
    "last year",
    "this month",
    "99 days ago",
    "0 days ago",
    "-3 weeks ago",
    "in 99999",
    "since 10000 BC",
    "before 0001-01-01",
    "yesterday",
    "on 31 February",
    "1 January 0000",
    "30 February 2024",
    "31 dec 9999",
    "August 0000",
    "December 9999",
    "99 may, 99999",
    "When did I move?",
)
SHORT_HOSTILE = st.sampled_from([text[:20] for text in HOSTILE])
# lone surrogates: a JSON body carries them escaped; a URL or a header cannot carry them at all
SURROGATES = ("\ud800", "\udfff", "a\udc00b", "\ud83e")
QUERIES = st.one_of(
    st.sampled_from(HOSTILE + SURROGATES),
    st.sampled_from(TIME_WORDS),
    st.builds(
        lambda pre, day, month, year, pad, post: f"{pre} {day} {month}{pad}{year}{post}",
        SHORT_HOSTILE,
        st.integers(-5, 99).map(str),
        st.sampled_from(["jan", "Feb.", "march", "sept", "December", "may", "aug"]),
        st.integers(0, 99999).map(lambda y: f"{y:04d}"),
        st.sampled_from(["", " ", ", ", " " * 500, "\t,\t", ",,"]),
        SHORT_HOSTILE,
    ),
    st.text(max_size=30),
)
MOMENTS = st.one_of(
    st.sampled_from(
        [
            "0001-01-01T00:00:00+23:59",
            "9999-12-31T23:59:59-23:59",
            "2026-02-30T00:00:00+00:00",
            "2026-01-01T00:00:00",
            "2026-01-01",
            "nonsense",
            "",
            "|",
        ]
    ),
    st.datetimes(
        timezones=st.sampled_from(
            [UTC, timezone(timedelta(hours=14)), timezone(-timedelta(hours=23, minutes=59))]
        )
    ).map(lambda d: d.isoformat()),
)
CURSORS = st.one_of(
    st.sampled_from(HOSTILE),
    st.builds(_cursor, MOMENTS, st.one_of(st.uuids().map(str), SHORT_HOSTILE)),
    st.binary(max_size=48).map(lambda raw: base64.urlsafe_b64encode(raw).decode().rstrip("=")),
)
CLAIM_VALUES = st.one_of(
    SHORT_HOSTILE,
    st.integers(-(2**63), 2**63),
    st.sampled_from([0, -1, 4102444800, 10**20, 1.5, True]),
    st.lists(SHORT_HOSTILE, max_size=3),
    st.none(),
)
TOKENS = st.one_of(
    st.sampled_from(HOSTILE),
    st.builds(lambda a, b, c: f"{a}.{b}.{c}", SHORT_HOSTILE, SHORT_HOSTILE, SHORT_HOSTILE),
    st.builds(lambda t: "pmem_sk_" + t, SHORT_HOSTILE),
    st.builds(
        lambda claims, alg: mint_or_garbage(claims, alg),
        st.dictionaries(
            st.sampled_from(["sub", "exp", "pmem_role", "pmem_teams", "pmem_use", "jti", "iss", "aud"]),
            CLAIM_VALUES,
            max_size=8,
        ),
        st.sampled_from(["HS256", "none"]),
    ),
)


def mint_or_garbage(claims: dict[str, object], algorithm: str) -> str:
    """A JWT signed with the server's secret (or unsigned) over arbitrary claims."""
    import jwt

    key = "" if algorithm == "none" else SECRET
    try:
        return jwt.encode(claims, key, algorithm=algorithm)
    except (TypeError, ValueError, jwt.PyJWTError):  # PyJWT refuses some claims (a non-string iss)
        return jwt.encode({k: str(v) for k, v in claims.items()}, key, algorithm=algorithm)


def _header_safe(token: str) -> str:
    return "".join(c for c in token if 0x20 <= ord(c) < 0x7F)


async def _fuzz(
    app: Served, user: uuid.UUID, queries: list[str], cursors: list[str], tokens: list[str]
) -> list[str]:
    """Every request that answered 5xx, as `METHOD path: status` (`user`: whose memories recall
    and the person's list read)."""
    server_errors: list[str] = []
    service = {"Authorization": f"Bearer {app.key}"}
    person = {"Authorization": f"Bearer {mint_jwt(secret=SECRET, subject=user)}"}

    async def check(answer: httpx.Response, what: str) -> None:
        if answer.status_code >= 500:
            server_errors.append(f"{what}: {answer.status_code}")

    for query in queries:
        # json.dumps escapes a lone surrogate (`\\ud800`), as a client in any language may send it
        body = json.dumps({"user_id": str(user), "team_id": str(TEAM_A), "query": query})
        sent = {**service, "Content-Type": "application/json"}
        await check(await app.http.post("/v1/recall", content=body, headers=sent), f"recall {query!r}")
    for cursor in cursors:
        await check(
            await app.http.get("/v1/me/memories", params={"cursor": cursor}, headers=person), f"me {cursor!r}"
        )
        await check(
            await app.http.get("/v1/review", params={"cursor": cursor}, headers=app.admin),
            f"review {cursor!r}",
        )
    for token in tokens:
        header = {"Authorization": f"Bearer {_header_safe(token)}"}
        await check(await app.http.get("/v1/me/memories", headers=header), f"bearer {token!r}")
        await check(await app.http.get("/ui/login", params={"token": token}), f"login {token!r}")
    return server_errors


@pytest.fixture(scope="module")
def fuzzed_user(served: Served) -> uuid.UUID:
    """A person with a few active memories said on different days: recall ranks them (a query's
    time words filter them) and their list pages them."""
    user = uuid.uuid4()
    for n in range(5):
        served.run(
            served.store.writes.upsert(
                user_fact(
                    user,
                    f"fact {n}",
                    f"Likes {n}",
                    status="active",
                    team_id=TEAM_A,
                    observed_at=datetime(2023, 8, n + 1, tzinfo=UTC),
                ),
            )
        )
    return user


EDGE_MOMENTS = (
    "0001-01-01T00:00:00+23:59",
    "9999-12-31T23:59:59-23:59",
    "2026-02-30T00:00:00+00:00",
    "2026-01-01T00:00:00",
    "nonsense",
    "",
)
# every corpus entry once, on every run, before the drawn examples
EVERY_HOSTILE_INPUT = {
    "queries": [*HOSTILE, *SURROGATES, *TIME_WORDS],
    "cursors": [
        *HOSTILE,
        *(_cursor(moment, item) for moment in EDGE_MOMENTS for item in (str(uuid.UUID(int=1)), "x")),
    ],
    "tokens": [*HOSTILE, mint_or_garbage({"sub": "x", "exp": 10**20}, "HS256")],
}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@example(**EVERY_HOSTILE_INPUT)
@given(
    queries=st.lists(QUERIES, min_size=1, max_size=8),
    cursors=st.lists(CURSORS, min_size=1, max_size=6),
    tokens=st.lists(TOKENS, min_size=1, max_size=6),
)
def test_no_query_cursor_or_credential_makes_the_api_answer_5xx(
    served: Served, fuzzed_user: uuid.UUID, queries: list[str], cursors: list[str], tokens: list[str]
) -> None:
    """Forty examples of a few inputs each, drawn mostly from corpora of hostile strings (a few
    hundred inputs, about a thousand requests, seconds)."""
    errors = served.run(_fuzz(served, fuzzed_user, queries, cursors, tokens))
    assert errors == [], errors[:10]
