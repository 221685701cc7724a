"""`pmem token`: mint a JWT with PMEM_AUTH_JWT_SECRET, as the chat platform would (development and
the demo; production tokens come from the platform's identity provider)."""

from __future__ import annotations

import argparse
import sys
import uuid

from api.auth import mint_jwt
from api.principal import PERSON_ROLES
from cli.commands.recall import uuid_arg
from config import load_settings


def register(parser: argparse.ArgumentParser) -> None:
    """Add the arguments of `pmem token`."""
    parser.add_argument("--sub", type=uuid_arg, help="the person's UUID (default: a new random one)")
    parser.add_argument("--role", choices=PERSON_ROLES, default="user", help="pmem_role (default user)")
    parser.add_argument(
        "--team", type=uuid_arg, action="append", default=[], help="a team UUID for pmem_teams (repeatable)"
    )
    parser.add_argument("--ttl", type=int, default=3600, help="lifetime in seconds (default 3600)")
    parser.add_argument(
        "--login-url",
        metavar="BASE",
        help="print a single-use UI sign-in link on BASE instead (lifetime: --ttl, at most "
        "PMEM_UI_SIGN_IN_MAX_S), e.g. http://127.0.0.1:8080",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Print a signed token (or a sign-in link)."""
    settings = load_settings()
    if not settings.auth_jwt_secret:
        print(
            "pmem token: PMEM_AUTH_JWT_SECRET is not set; pmem token signs HS256 tokens with it",
            file=sys.stderr,
        )
        return 2
    if args.ttl < 1:
        print("pmem token: --ttl must be at least 1 second", file=sys.stderr)
        return 2
    # a sign-in link carries a single-use sign-in token, living at most PMEM_UI_SIGN_IN_MAX_S
    ttl = min(args.ttl, settings.ui_sign_in_max_s) if args.login_url else args.ttl
    token = mint_jwt(
        secret=settings.auth_jwt_secret,
        subject=args.sub or uuid.uuid4(),
        role=args.role,
        teams=tuple(args.team),
        ttl_s=ttl,
        issuer=settings.auth_issuer,
        audience=settings.auth_audience,
        sign_in=bool(args.login_url),
    )
    print(f"{args.login_url.rstrip('/')}/ui/login?token={token}" if args.login_url else token)
    return 0
