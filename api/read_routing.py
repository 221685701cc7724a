"""Read your own writes with read replicas (`PMEM_DATABASE_READ_URL`).

The store serves recall, listing, export and the review queue from a replica, which may be up to
`PMEM_READ_MAX_LAG_S` behind (`store.postgres.replicas`). A caller who has just changed something
must see it: after a request whose write committed (`store.read_scope.ReadScope.wrote`), that
caller's reads go to the primary for `window_s` = `PMEM_READ_MAX_LAG_S` + 2 s (the lag bound plus
the lag check's interval and duration: past it, a replica in use has replayed the write). Two
records of it:

- in this process, by the caller's identity (`Principal.actor`): a platform's service key, a
  person's JWT or web-UI session;
- in a cookie on the response (`pmem_read_primary`, `Max-Age` = the window), so a browser's next
  page reads from the primary whichever API process or pod answers it.

A bearer-token client whose next request reaches another process within the window may read
from a replica: at most the lag bound behind.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from starlette.datastructures import MutableHeaders
from starlette.types import Scope

from api.cookies import request_cookies

COOKIE = "pmem_read_primary"
# the lag check runs at most every second and takes at most a second more
CHECK_MARGIN_S = 2.0


@dataclass(kw_only=True)
class RecentWriters:
    """Who wrote in the last `window_s` seconds, in this process."""

    window_s: float
    max_entries: int = 100_000
    clock: Callable[[], float] = time.monotonic
    _wrote_at: dict[str, float] = field(default_factory=dict)

    def note(self, actor: str) -> None:
        """`actor` wrote just now."""
        now = self.clock()
        if len(self._wrote_at) >= self.max_entries:
            self._wrote_at = {a: t for a, t in self._wrote_at.items() if now - t < self.window_s}
            if len(self._wrote_at) >= self.max_entries:
                self._wrote_at.clear()  # a flood of writers: forget them all (the cookie still holds)
        self._wrote_at.pop(actor, None)
        self._wrote_at[actor] = now

    def wrote_recently(self, actor: str) -> bool:
        """Whether `actor` wrote within the window."""
        at = self._wrote_at.get(actor)
        if at is None:
            return False
        if self.clock() - at < self.window_s:
            return True
        del self._wrote_at[actor]
        return False


def wants_primary(scope: Scope) -> bool:
    """Whether a request carries the cookie of a recent write (its reads go to the primary)."""
    return COOKIE in request_cookies(scope)


def after_write(scope: Scope, headers: MutableHeaders, writers: RecentWriters) -> None:
    """A write committed in this request: remember its caller here, and in the response's cookie."""
    principal = scope.get("state", {}).get("principal")
    if principal is not None:
        writers.note(principal.actor)
    cookie = f"{COOKIE}=1; Max-Age={max(1, round(writers.window_s))}; Path=/; HttpOnly; SameSite=lax"
    if scope.get("scheme") == "https":
        cookie += "; Secure"
    headers.append("set-cookie", cookie)
