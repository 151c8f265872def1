"""Who may see and do what: loopback, the token, the access hook, CSRF and the audit log.

- With neither a token nor an access hook only loopback clients are served (the CLI also
  refuses to bind beyond loopback then: :func:`check_exposure`).
- A token is accepted as ``Authorization: Bearer T`` or once as ``?token=T``, which sets an
  HttpOnly, SameSite=Strict session cookie holding an HMAC of the token (never the token).
- The access hook decides per request: ``"full"``, ``"read-only"``, an iterable of allowed
  action names, or None (refused); it may also return an :class:`Access` naming the user.
- Actions are POST with a CSRF token (a form field or ``X-CSRF-Token``) that only a page of
  the dashboard can read, and an Origin, when sent, that is the dashboard's own.
"""

from __future__ import annotations

import hashlib
import hmac
import inspect
import ipaddress
import logging
import secrets
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from starlette.requests import Request

from postroom.errors import InvalidArgument

ACTIONS = frozenset(
    {
        "retry_job",
        "cancel_job",
        "delete_job",
        "pause_queue",
        "resume_queue",
        "run_schedule",
        "reset_group",
        "replay_dead_letters",
    }
)
COOKIE = "postroom_dashboard"
audit_log = logging.getLogger("postroom.web.audit")


@dataclass(frozen=True)
class Access:
    """What one request may do: ``actions`` is the set of allowed action names (empty: read
    only); ``user`` names the person in the audit log."""

    actions: frozenset[str] = ACTIONS
    user: str = "anonymous"

    @property
    def read_only(self) -> bool:
        return not self.actions

    def may(self, action: str) -> bool:
        return action in self.actions


AccessHook = Callable[[Request], "AccessResult | Awaitable[AccessResult]"]
AccessResult = Access | str | Iterable[str] | None


def coerce_access(result: AccessResult, user: str) -> Access | None:
    """An access hook's answer as an :class:`Access` (None: refused)."""
    if result is None or isinstance(result, Access):
        return result
    if result == "full":
        return Access(ACTIONS, user)
    if result == "read-only":
        return Access(frozenset(), user)
    if isinstance(result, str):
        raise InvalidArgument(
            f"access hook returned {result!r}: return 'full', 'read-only', a list of actions "
            f"({', '.join(sorted(ACTIONS))}), an Access or None"
        )
    names = frozenset(result)
    unknown = names - ACTIONS
    if unknown:
        raise InvalidArgument(
            f"access hook allowed unknown actions {sorted(unknown)}: the actions are "
            f"{', '.join(sorted(ACTIONS))}"
        )
    return Access(names, user)


def is_loopback(host: str) -> bool:
    if host in ("localhost", ""):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_exposure(host: str, token: str | None, access: object = None) -> None:
    """Refuse to serve beyond loopback without a token or an access hook."""
    if not is_loopback(host) and not token and access is None:
        raise InvalidArgument(
            f"refusing to serve the dashboard on {host!r} without a token: pass --token "
            "(or set POSTROOM_DASHBOARD_TOKEN), or an access hook to postroom.web.app(); "
            "without one it binds to loopback (127.0.0.1) only"
        )


@dataclass
class Guard:
    """The security policy of one dashboard app."""

    token: str | None
    access: AccessHook | None
    read_only: bool
    secret: bytes = field(default_factory=lambda: secrets.token_bytes(32))
    audit_hook: Callable[[dict[str, Any]], None] | None = None
    recent: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=200))

    @property
    def csrf_token(self) -> str:
        return hmac.new(self.secret, b"csrf", hashlib.sha256).hexdigest()

    def session_value(self) -> str:
        assert self.token is not None
        return hmac.new(self.token.encode(), b"postroom-session", hashlib.sha256).hexdigest()

    def token_ok(self, request: Request) -> bool:
        """Whether the request carries the token (header, query or session cookie)."""
        if self.token is None:
            return True
        given = request.headers.get("authorization", "")
        if given.startswith("Bearer ") and hmac.compare_digest(given[7:], self.token):
            return True
        query = request.query_params.get("token")
        if query is not None and hmac.compare_digest(query, self.token):
            return True
        cookie = request.cookies.get(COOKIE)
        return cookie is not None and hmac.compare_digest(cookie, self.session_value())

    async def resolve(self, request: Request) -> Access | None:
        """The request's access, or None to refuse it (401/403)."""
        client_host = request.client.host if request.client else ""
        if self.token is None and self.access is None and not is_loopback(client_host):
            return None
        if not self.token_ok(request):
            return None
        user = "token" if self.token else f"loopback {client_host}"
        access: Access | None = Access(ACTIONS, user)
        if self.access is not None:
            result = self.access(request)
            if inspect.isawaitable(result):
                result = await result
            access = coerce_access(result, client_host or "anonymous")
        if access is not None and self.read_only:
            access = Access(frozenset(), access.user)
        return access

    def csrf_ok(self, request: Request, form_token: str | None) -> bool:
        """A POST's CSRF token matches and its Origin, if sent, is this host."""
        given = request.headers.get("x-csrf-token") or form_token or ""
        if not hmac.compare_digest(given, self.csrf_token):
            return False
        origin = request.headers.get("origin")
        if origin and origin != "null":
            return urlsplit(origin).netloc == request.headers.get("host", "")
        return True

    def audit(self, access: Access, action: str, target: str, rows: int) -> None:
        """Record one action: who, what, on what, when, how many rows."""
        entry = {
            "at": datetime.now(UTC).isoformat(timespec="seconds"),
            "user": access.user,
            "action": action,
            "target": target,
            "rows": rows,
        }
        self.recent.appendleft(entry)
        audit_log.info("%(user)s %(action)s %(target)s: %(rows)s row(s)", entry)
        if self.audit_hook is not None:
            self.audit_hook(entry)
