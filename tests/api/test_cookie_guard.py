"""The `Cookie` header read once, in linear time (`api.cookies`): a header over the cap is a 431,
a quoted value full of backslashes costs microseconds (Python's own unquoting is quadratic before
3.11.10), the app's readers see the same cookies as before, and nothing imports `http.cookies`."""

from __future__ import annotations

import pathlib
import time

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from api.cookies import MAX_COOKIE_BYTES, CookieGuard, parse_cookies
from api.read_routing import COOKIE, wants_primary

HOSTILE = 'a="' + "\\" * 7_900 + '"'


def _echo_app() -> CookieGuard:
    async def echo(request: Request) -> JSONResponse:
        return JSONResponse({"cookies": request.cookies, "primary": wants_primary(request.scope)})

    return CookieGuard(Starlette(routes=[Route("/", echo)]))


async def _get(cookie: str) -> httpx.Response:
    transport = httpx.ASGITransport(app=_echo_app())
    async with httpx.AsyncClient(transport=transport, base_url="http://pmem.test") as client:
        return await client.get("/", headers={"Cookie": cookie})


async def test_cookies_over_the_cap_are_a_431() -> None:
    answer = await _get('a="' + "\\" * 15_500 + '"')
    assert answer.status_code == 431
    assert "cookies over" in answer.json()["error"]


async def test_a_quoted_value_full_of_backslashes_costs_little() -> None:
    started = time.process_time()
    answer = await _get(HOSTILE)
    spent = time.process_time() - started
    assert answer.status_code == 200
    # Python 3.11.7's unquoting spends ~0.1 s on this one header; one linear pass, well under 20 ms
    assert spent < 0.020, spent
    assert answer.json()["cookies"]["a"] == "\\" * (7_900 // 2)


async def test_the_app_reads_the_cookies_it_always_read() -> None:
    answer = await _get(f'pmem_session=abc123; {COOKIE}=1; q="a\\"b\\\\c\\073d"; plain=x y')
    body = answer.json()
    assert body["primary"] is True
    assert body["cookies"]["pmem_session"] == "abc123"
    assert body["cookies"]["plain"] == "x y"
    assert "q" not in body["cookies"]  # unquoted it holds ";": no header could carry it unquoted


async def test_without_the_cookie_reads_go_where_they_went() -> None:
    assert (await _get("pmem_session=abc")).json()["primary"] is False
    assert (await _get(f"x={COOKIE}")).json()["primary"] is False


@pytest.mark.parametrize(
    ("header", "parsed"),
    [
        ("a=1; b=2", {"a": "1", "b": "2"}),
        ('a="x\\"y"', {"a": 'x"y'}),
        ('a="\\101\\102"', {"a": "AB"}),
        ("lonely", {"": "lonely"}),
        ("a=1; a=2", {"a": "2"}),
        ("  ; ;", {}),
    ],
)
def test_parse_cookies(header: str, parsed: dict[str, str]) -> None:
    assert parse_cookies(header) == parsed


def _parse_cpu(size: int) -> float:
    """Process CPU seconds to parse a quoted value of `size` backslashes."""
    started = time.process_time()
    parse_cookies('a="' + "\\" * size + '"')
    return time.process_time() - started


def test_parsing_is_linear() -> None:
    # against the same parse at a hundredth of the size on this machine (best of five), not a fixed
    # time: linear costs ~100 times as much, quadratic (Python's own unquoting) ~10,000 times
    small = min(_parse_cpu(MAX_COOKIE_BYTES) for _ in range(5))
    assert _parse_cpu(100 * MAX_COOKIE_BYTES) < 400 * small + 0.05


def test_nothing_in_the_product_parses_cookies_with_http_cookies() -> None:
    root = pathlib.Path(__file__).resolve().parents[2]
    for package in ("api", "store", "worker", "extraction"):
        for source in (root / package).rglob("*.py"):
            text = source.read_text(encoding="utf-8")
            assert "import SimpleCookie" not in text and "import http.cookies" not in text, source


async def test_the_api_caps_and_parses_cookies_before_any_route(client: httpx.AsyncClient) -> None:
    assert (await client.get("/healthz", headers={"Cookie": "a=" + "x" * 9_000})).status_code == 431
    started = time.process_time()
    for _ in range(4):
        assert (await client.get("/healthz", headers={"Cookie": HOSTILE})).status_code == 200
    assert time.process_time() - started < 0.2
