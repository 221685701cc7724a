"""What the OpenAPI document promises, kept true: every status each route can answer (with the error
schema), and the `Allow` header of a path listing every method it supports.

`ROUTE_ERRORS` is the one table of error statuses per route; `document_errors` writes it into the
routes' `responses`, and a route missing from it fails the start of the app (and its test), so a new
route cannot ship undocumented."""

from __future__ import annotations

import re
from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel

from api.answers import with_answer_schemas


class ErrorBody(BaseModel):
    """Every error's body: what is wrong and, where it helps, how to fix it."""

    error: str


WHY: dict[int, str] = {
    400: "The request cannot be processed as sent",
    401: "No credential, or one that is expired, forged or revoked",
    403: "The caller's role lacks this right (or a cookie-authenticated change lacks its CSRF token)",
    404: "No such item, or one the caller may not see (the same answer, so nothing leaks)",
    409: "The item changed state (nothing is pending any more)",
    413: "The request body is over the configured limit",
    422: "A field is missing or invalid (the message names it); for a tool call, the tool's error",
    503: "The database does not answer",
}

# 401/403 apply to every authenticated route; 413 is added to every method that takes a body
_AUTH = (401, 403)
_BODY = (413, 422)
ROUTE_ERRORS: dict[tuple[str, str], tuple[int, ...]] = {
    ("GET", "/healthz"): (),
    ("GET", "/readyz"): (),  # its 503 body is the readiness answer, documented with the route
    ("GET", "/metrics"): (),
    ("GET", "/v1/me/memories"): (*_AUTH, 422),
    ("DELETE", "/v1/me/memories"): _AUTH,
    ("PATCH", "/v1/me/memories/{memory_id}"): (*_AUTH, 404, *_BODY),
    ("DELETE", "/v1/me/memories/{memory_id}"): (*_AUTH, 404, 422),
    ("POST", "/v1/me/memories/{memory_id}/reject"): (*_AUTH, 404, 409, *_BODY),
    ("GET", "/v1/me/conversations"): (*_AUTH, 422),
    ("DELETE", "/v1/me/conversations"): _AUTH,
    ("DELETE", "/v1/me/conversations/{channel_id}"): (*_AUTH, 404, 422),
    ("GET", "/v1/me/export"): _AUTH,
    ("GET", "/v1/review"): (*_AUTH, 422),
    ("POST", "/v1/review/bulk"): (*_AUTH, *_BODY),
    ("POST", "/v1/review/{item_id}/approve"): (*_AUTH, 404, 409, 422),
    ("POST", "/v1/review/{item_id}/reject"): (*_AUTH, 404, 409, *_BODY),
    ("POST", "/v1/review/{item_id}/edit"): (*_AUTH, 404, 409, *_BODY),
    ("GET", "/v1/memories/{memory_id}"): (*_AUTH, 404, 422),
    ("PUT", "/v1/memories/{memory_id}/pinned"): (*_AUTH, 404, *_BODY),
    ("GET", "/v1/settings/global"): _AUTH,
    ("PUT", "/v1/settings/global"): (*_AUTH, *_BODY),
    ("GET", "/v1/settings/teams/{team_id}"): (*_AUTH, 422),
    ("PUT", "/v1/settings/teams/{team_id}"): (*_AUTH, *_BODY),
    ("GET", "/v1/settings/personas/{persona_id}"): (*_AUTH, 422),
    ("PUT", "/v1/settings/personas/{persona_id}"): (*_AUTH, *_BODY),
    ("POST", "/v1/recall"): (*_AUTH, *_BODY),
    ("POST", "/v1/hint"): (*_AUTH, *_BODY),
    ("DELETE", "/v1/users/{user_id}/memories"): (*_AUTH, 422),
    ("GET", "/v1/tools"): (401,),
    ("POST", "/v1/tools/call"): (*_AUTH, *_BODY),
    ("PUT", "/v1/directory/{kind}/{item_id}"): (*_AUTH, *_BODY),
}


def route_statuses(paths: dict[str, dict[str, Any]]) -> dict[tuple[str, str], list[int]]:
    """The error statuses of every documented operation; ValueError naming one that has no entry
    in `ROUTE_ERRORS` (add it there)."""
    found: dict[tuple[str, str], list[int]] = {}
    for path, operations in paths.items():
        for method in operations:
            key = (method.upper(), path)
            if key not in ROUTE_ERRORS:
                raise ValueError(
                    f"{key[0]} {path} has no entry in api.openapi.ROUTE_ERRORS: add its statuses"
                )
            # the body limit applies to every request that can carry a body
            body = (413,) if key[0] in ("POST", "PUT", "PATCH", "DELETE") else ()
            found[key] = sorted({*ROUTE_ERRORS[key], *body})
    return found


def with_error_responses(schema: dict[str, Any]) -> dict[str, Any]:
    """The OpenAPI document with every operation's error statuses, each answering `ErrorBody` (also
    422: the app's validation errors are `{"error": …}` too, not FastAPI's default shape)."""
    statuses = route_statuses(schema["paths"])
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    components["ErrorBody"] = ErrorBody.model_json_schema()
    for name in ("HTTPValidationError", "ValidationError"):
        components.pop(name, None)
    error = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}
    for (method, path), codes in statuses.items():
        responses = schema["paths"][path][method.lower()].setdefault("responses", {})
        responses.pop("422", None)
        for code in codes:
            responses[str(code)] = {"description": WHY[code], "content": error}
    return schema


def document_errors(app: FastAPI) -> None:
    """Make `app.openapi()` document every operation's error statuses and answer schemas; built at
    once, so an operation missing from `ROUTE_ERRORS` fails when the app is built, not when a client
    asks."""
    default = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = with_answer_schemas(with_error_responses(default()))
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    app.openapi()


def _template(path: str) -> re.Pattern[str]:
    return re.compile("^" + re.sub(r"\\{[^}]+\\}", "[^/]+", re.escape(path)) + "$")


def path_methods(schema: dict[str, Any], path: str) -> list[str] | None:
    """Every method the documented path answers (and OPTIONS), for `Allow`; None for a path the
    document does not describe."""
    methods: set[str] = set()
    for template, operations in schema["paths"].items():
        if _template(template).match(path):
            methods.update(method.upper() for method in operations)
    if not methods:
        return None
    return sorted({*methods, "OPTIONS"})
