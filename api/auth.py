"""Authentication: JWTs minted by the chat platform (people) and API keys (services).

Tokens arrive as `Authorization: Bearer …`. Verification uses PyJWT: HS256 with
`PMEM_AUTH_JWT_SECRET`, RS256/ES256 with `PMEM_AUTH_JWT_PUBLIC_KEY`; `exp` and `sub` are required;
`iss`/`aud` are checked when configured. The web UI signs in with a sign-in token instead (a JWT
with `pmem_use: "sign_in"`, a `jti` and a short life, which the API refuses), exchanged once for a
session of the server's own (`store.core.ui_sessions`): the session cookie is a random value, never a
JWT."""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import jwt

from api.errors import Unauthorized
from api.principal import PERSON_ROLES, Principal
from store.core.api_keys import KEY_PREFIX, hash_key
from store.model import ApiKey
from store.services.ttl_cache import TtlCache

SESSION_COOKIE = "pmem_session"
CSRF_HEADER = "X-CSRF-Token"
USE_CLAIM = "pmem_use"
SIGN_IN_USE = "sign_in"  # the `pmem_use` of a sign-in token
SESSION_PREFIX = "pmem_ui_"
# a revoked key stops working within this many seconds on every API process
API_KEY_CACHE_S = 10.0


@dataclass(frozen=True, kw_only=True, slots=True)
class AuthConfig:
    """How tokens are verified (from the `PMEM_AUTH_*` settings)."""

    jwt_secret: str | None = None
    jwt_public_key: str | None = None
    issuer: str | None = None
    audience: str | None = None
    insecure_dev: bool = False

    @property
    def configured(self) -> bool:
        """Whether people can authenticate at all."""
        return bool(self.jwt_secret or self.jwt_public_key)

    def algorithms(self) -> list[str]:
        """The JWT algorithms accepted: HS256 with a secret, RS256/ES256 with a public key."""
        algorithms: list[str] = []
        if self.jwt_secret:
            algorithms.append("HS256")
        if self.jwt_public_key:
            algorithms += ["RS256", "ES256"]
        return algorithms


def principal_from_claims(claims: Mapping[str, Any]) -> Principal:
    """A person from verified JWT claims; Unauthorized when a claim is malformed."""
    try:
        subject = uuid.UUID(str(claims["sub"]))
    except (KeyError, ValueError) as exc:
        raise Unauthorized("token claim `sub` must be the user's UUID") from exc
    role = claims.get("pmem_role", "user")
    if role not in PERSON_ROLES:
        raise Unauthorized(f"token claim `pmem_role` must be one of {', '.join(PERSON_ROLES)}")
    raw_teams = claims.get("pmem_teams", [])
    if not isinstance(raw_teams, list):
        raise Unauthorized("token claim `pmem_teams` must be a list of team UUIDs")
    try:
        teams = frozenset(uuid.UUID(str(team)) for team in raw_teams)
    except ValueError as exc:
        raise Unauthorized("token claim `pmem_teams` must be a list of team UUIDs") from exc
    return Principal(role=role, subject=subject, teams=teams)


def verify_jwt(token: str, config: AuthConfig) -> Principal:
    """The person an API JWT names; Unauthorized (with the reason) when it is expired, forged,
    malformed or a sign-in token (those only open a web-UI session)."""
    claims = _verified_claims(token, config)
    if claims.get(USE_CLAIM) is not None:
        raise Unauthorized(
            f"a token with `{USE_CLAIM}` is not an API credential; a sign-in token only opens /ui/login"
        )
    return principal_from_claims(claims)


@dataclass(frozen=True, kw_only=True, slots=True)
class SignIn:
    """A verified sign-in token: who it signs in, its id (single use) and when it expires."""

    principal: Principal
    token_id: str
    expires_at: datetime


def verify_sign_in_token(token: str, config: AuthConfig, *, now: float, max_life_s: float) -> SignIn:
    """A sign-in token's person, id and expiry; Unauthorized when it is not a valid sign-in token:
    expired, forged, without `pmem_use: "sign_in"` or a `jti`, or living longer than `max_life_s`."""
    claims = _verified_claims(token, config)
    if claims.get(USE_CLAIM) != SIGN_IN_USE:
        raise Unauthorized(
            f'not a sign-in token: it needs `{USE_CLAIM}: "{SIGN_IN_USE}"` and a `jti` '
            "(an API token is never accepted in a link)"
        )
    token_id = claims.get("jti")
    if not isinstance(token_id, str) or not token_id:
        raise Unauthorized("a sign-in token needs a `jti` claim: a unique id, so that it works once")
    expires = float(claims["exp"])
    if expires - now > max_life_s:
        raise Unauthorized(
            f"the sign-in token lives {expires - now:.0f} s; at most {max_life_s:.0f} s are accepted"
        )
    principal = principal_from_claims(claims)
    subject = principal.subject
    return SignIn(
        principal=principal,
        token_id=hashlib.sha256(f"{subject}:{token_id}".encode()).hexdigest(),
        expires_at=datetime.fromtimestamp(expires, UTC),
    )


def new_session_token() -> str:
    """A new web-UI session cookie value: 256 random bits."""
    return SESSION_PREFIX + secrets.token_urlsafe(32)


def session_digest(token: str) -> str:
    """What the store keeps of a session cookie (random 256 bits, so a fast hash is enough)."""
    return hashlib.sha256(token.encode()).hexdigest()


def _verified_claims(token: str, config: AuthConfig) -> dict[str, Any]:
    """The claims of a JWT whose signature, `exp`, `sub` (and `iss`/`aud` when configured) verify."""
    if not config.configured:
        raise Unauthorized(
            "JWT sign-in is not configured on this server (PMEM_AUTH_JWT_SECRET or _PUBLIC_KEY)"
        )
    try:
        algorithm = jwt.get_unverified_header(token).get("alg")
    except jwt.InvalidTokenError as exc:
        raise Unauthorized("the bearer token is not a JWT") from exc
    if algorithm not in config.algorithms():
        raise Unauthorized(
            f"JWT algorithm {algorithm!r} is not accepted; use {', '.join(config.algorithms())}"
        )
    key = config.jwt_secret if algorithm == "HS256" else config.jwt_public_key
    try:
        claims = jwt.decode(
            token,
            key=key or "",
            algorithms=[algorithm],
            issuer=config.issuer,
            audience=config.audience,
            options={"require": ["exp", "sub"], "verify_aud": config.audience is not None},
        )
    except jwt.ExpiredSignatureError as exc:
        raise Unauthorized("the token has expired; sign in again") from exc
    except jwt.InvalidTokenError as exc:
        raise Unauthorized(f"the token is not valid: {exc}") from exc
    except (jwt.PyJWTError, ValueError, TypeError) as exc:
        # e.g. InvalidKeyError: an ES256 header against an RSA key (or the reverse)
        raise Unauthorized(
            f"the token's algorithm {algorithm} does not fit the configured PMEM_AUTH_JWT_PUBLIC_KEY"
        ) from exc
    return dict(claims)


def mint_jwt(
    *,
    secret: str,
    subject: uuid.UUID,
    role: str = "user",
    teams: tuple[uuid.UUID, ...] = (),
    ttl_s: int = 3600,
    issuer: str | None = None,
    audience: str | None = None,
    sign_in: bool = False,
) -> str:
    """An HS256 token like the platform mints (for development, the demo and tests); with `sign_in`
    a single-use sign-in token for `/ui/login?token=` instead of an API token."""
    now = int(time.time())
    claims: dict[str, Any] = {"sub": str(subject), "pmem_role": role, "iat": now, "exp": now + ttl_s}
    if sign_in:
        claims[USE_CLAIM] = SIGN_IN_USE
        claims["jti"] = secrets.token_urlsafe(16)
    if teams:
        claims["pmem_teams"] = [str(team) for team in teams]
    if issuer:
        claims["iss"] = issuer
    if audience:
        claims["aud"] = audience
    return jwt.encode(claims, secret, algorithm="HS256")


class ApiKeyCache:
    """Verified API keys, remembered for a few seconds so a busy platform does not hit the
    database for every recall."""

    def __init__(
        self, verify: Callable[[str], Awaitable[ApiKey | None]], ttl_s: float = API_KEY_CACHE_S
    ) -> None:
        self._verify = verify
        self._cache: TtlCache[str, ApiKey | None] = TtlCache(ttl_s=ttl_s)

    async def principal(self, key: str) -> Principal:
        """The service a key belongs to; Unauthorized when unknown or revoked."""
        record = await self._cache.get_or_load(hash_key(key), lambda: self._verify(key))
        if record is None:
            raise Unauthorized("the API key is unknown or revoked")
        return Principal(role="service", service_name=record.name)


SessionLookup = Callable[[str], Awaitable[Principal | None]]


async def authenticate(
    *,
    bearer: str | None,
    cookie: str | None,
    config: AuthConfig,
    keys: ApiKeyCache,
    sessions: SessionLookup | None = None,
) -> Principal:
    """The caller behind an Authorization bearer (JWT or API key) or the web-UI session cookie
    (looked up with `sessions`)."""
    if bearer:
        if bearer.startswith(KEY_PREFIX):
            return await keys.principal(bearer)
        return verify_jwt(bearer, config)
    if cookie and sessions is not None:
        principal = await sessions(cookie)
        if principal is None:
            raise Unauthorized("the session has ended or expired; open the sign-in link again")
        return principal
    if config.insecure_dev:
        return Principal(role="admin", subject=uuid.UUID(int=0), teams=frozenset())
    raise Unauthorized("no credential: send `Authorization: Bearer <JWT or API key>`")


def csrf_token(session: str, config: AuthConfig) -> str:
    """The CSRF token bound to one session (forms and cookie-authenticated API calls must send it)."""
    key = hashlib.sha256(
        ("pmem-csrf:" + (config.jwt_secret or config.jwt_public_key or "dev")).encode()
    ).digest()
    return hmac.new(key, session.encode(), hashlib.sha256).hexdigest()[:40]


def csrf_ok(session: str, presented: str | None, config: AuthConfig) -> bool:
    """Whether a presented CSRF token belongs to this session."""
    return presented is not None and hmac.compare_digest(csrf_token(session, config), presented)
