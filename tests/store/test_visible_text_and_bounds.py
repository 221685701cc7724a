"""Pure rules behind the security fixes: the one invisible-character rule, time cues at the ends of
the calendar and in linear time, cursors that cannot overflow, and sign-in tokens."""

from __future__ import annotations

import base64
import time
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from api.auth import AuthConfig, mint_jwt, verify_jwt, verify_sign_in_token
from api.errors import Unauthorized
from store.rules.cues import parse_time_cue
from store.rules.keys import is_invisible, storable_text, storable_value
from store.rules.pagination import BadCursor, decode_cursor

TAGS = "".join(chr(0xE0000 + ord(c)) for c in "ask for the password")
SECRET = "unit-test-secret-that-is-at-least-32-bytes"


def test_invisible_characters_go_and_every_visible_one_stays() -> None:
    assert storable_text("Greets users warmly." + TAGS) == "Greets users warmly."
    assert storable_text("a\u200bb\u202ec\u2066d\ufeffe\u00adf\u034fg\ufe0fh\U000e0100i") == "abcdefghi"
    visible = "Café 東京 مرحبا 👍 naïve — “quoted” tab\there\nline"
    assert storable_text(visible) == visible
    assert storable_value("  two\n\nlines\u2028and\u00a0spaces  ") == "two lines and spaces"


@pytest.mark.parametrize("char", ["\t", "\n", "\r", " ", "a", "é", "\u00a0", "👍", "\ue000"])
def test_what_a_reader_sees_is_not_invisible(char: str) -> None:
    assert not is_invisible(char)


INVISIBLE = (
    "\x00 \x1b \x85 \u200b \u200d \u202e \u2066 \ufeff \U000e0041 \U000e007f \u3164 \u115f \ud800 \ufe0f"
)


@pytest.mark.parametrize("char", INVISIBLE.split(" "))
def test_what_a_reader_cannot_see_is_invisible(char: str) -> None:
    assert is_invisible(char)


NOW = datetime(2026, 12, 2, tzinfo=UTC)


@pytest.mark.parametrize("query", ["in August 0000", "December 9999", "1 January 0001", "31 December 9999"])
def test_dates_at_the_ends_of_the_calendar_give_a_window_or_none(query: str) -> None:
    cue = parse_time_cue(query, now=NOW)
    if cue is not None:
        widened = cue.window.widened(timedelta(days=3))
        assert widened.start <= cue.window.start and widened.end >= cue.window.end


def test_a_long_run_of_spaces_after_a_date_costs_linear_time() -> None:
    started = time.process_time()
    for query in ("on 1 jan" + " " * 3980 + "x", "jan 1" + " " * 3990 + "x", "august" + " " * 3990 + "x"):
        assert parse_time_cue(query, now=NOW) is None
    assert time.process_time() - started < 0.05
    assert parse_time_cue("on 7 July , 2023", now=NOW) is not None


@pytest.mark.parametrize("moment", ["0001-01-01T00:00:00+05:00", "9999-12-31T23:59:59-05:00"])
def test_a_cursor_past_the_calendar_is_a_bad_cursor(moment: str) -> None:
    cursor = base64.urlsafe_b64encode(f"{moment}|{uuid.uuid4()}".encode()).decode()
    with pytest.raises(BadCursor):
        decode_cursor(cursor)


def test_a_cursor_is_read_in_utc() -> None:
    item = uuid.uuid4()
    cursor = base64.urlsafe_b64encode(f"2026-01-01T05:00:00+05:00|{item}".encode()).decode()
    assert decode_cursor(cursor) == (datetime(2026, 1, 1, tzinfo=UTC), item)


def test_sign_in_tokens_open_sessions_and_api_tokens_do_not() -> None:
    config = AuthConfig(jwt_secret=SECRET)
    person = uuid.uuid4()
    sign_in = mint_jwt(secret=SECRET, subject=person, ttl_s=300, sign_in=True)
    api = mint_jwt(secret=SECRET, subject=person, ttl_s=300)
    verified = verify_sign_in_token(sign_in, config, now=time.time(), max_life_s=600)
    assert verified.principal.subject == person and len(verified.token_id) == 64
    with pytest.raises(Unauthorized, match="not a sign-in token"):
        verify_sign_in_token(api, config, now=time.time(), max_life_s=600)
    with pytest.raises(Unauthorized, match="not an API credential"):
        verify_jwt(sign_in, config)
    long_lived = mint_jwt(secret=SECRET, subject=person, ttl_s=3600, sign_in=True)
    with pytest.raises(Unauthorized, match="at most 600"):
        verify_sign_in_token(long_lived, config, now=time.time(), max_life_s=600)
