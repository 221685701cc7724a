"""Authentication: JWTs minted by the chat platform (people) and API keys (services).

Tokens arrive as `Authorization: Bearer …`; the web UI's session cookie carries the same JWT.
Verification uses PyJWT: HS256 with `PMEM_AUTH_JWT_SECRET`, RS256/ES256 with
`PMEM_AUTH_JWT_PUBLIC_KEY`; `exp` and `sub` are required; `iss`/`aud` are checked when configured."""

from __future__ import annotations

import hashlib
import hmac
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import jwt

from api.errors import Unauthorized
from api.principal import PERSON_ROLES, Principal
from store.api_keys import KEY_PREFIX, hash_key
from store.types import ApiKey

SESSION_COOKIE = "pmem_session"
CSRF_HEADER = "X-CSRF-Token"
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
    """The person a JWT names; Unauthorized (with the reason) when it is expired, forged or malformed."""
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
    return principal_from_claims(claims)


def mint_jwt(
    *,
    secret: str,
    subject: uuid.UUID,
    role: str = "user",
    teams: tuple[uuid.UUID, ...] = (),
    ttl_s: int = 3600,
    issuer: str | None = None,
    audience: str | None = None,
) -> str:
    """An HS256 token like the platform mints (for development, the demo and tests)."""
    now = int(time.time())
    claims: dict[str, Any] = {"sub": str(subject), "pmem_role": role, "iat": now, "exp": now + ttl_s}
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
        self._ttl_s = ttl_s
        self._entries: dict[str, tuple[float, ApiKey | None]] = {}

    async def principal(self, key: str) -> Principal:
        """The service a key belongs to; Unauthorized when unknown or revoked."""
        digest = hash_key(key)
        now = time.monotonic()
        cached = self._entries.get(digest)
        if cached is None or cached[0] < now:
            if len(self._entries) > 10_000:
                self._entries.clear()
            cached = (now + self._ttl_s, await self._verify(key))
            self._entries[digest] = cached
        record = cached[1]
        if record is None:
            raise Unauthorized("the API key is unknown or revoked")
        return Principal(role="service", service_name=record.name)


async def authenticate(
    *, bearer: str | None, cookie: str | None, config: AuthConfig, keys: ApiKeyCache
) -> Principal:
    """The caller behind an Authorization bearer (JWT or API key) or the session cookie."""
    if bearer:
        if bearer.startswith(KEY_PREFIX):
            return await keys.principal(bearer)
        return verify_jwt(bearer, config)
    if cookie:
        return verify_jwt(cookie, config)
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
