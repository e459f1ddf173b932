"""Who may see the console: a session made by logging in with the data root's token.

Every route needs a session except the login page, the static files and (with
``--metrics-public``) ``/metrics``. Every POST carries its session's CSRF token (the
login form carries a token bound to a short-lived pre-session cookie), checked before
the handler reads anything else of the request.
"""

from __future__ import annotations

import hmac
import secrets
from urllib.parse import parse_qsl

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from impyard.web.access.console import Console
from impyard.web.access.sessions import COOKIE, CSRF_FIELD, CSRF_HEADER, Session
from impyard.web.access.token import token_matches

#: The largest form body the console reads (its forms hold a token and a few words).
MAX_FORM_BYTES = 16 * 1024
LOGIN_COOKIE = "impyard_login"
OPEN_PATHS = ("/login", "/static/")


class RequireSession:
    """Refuses every request without a live session (401), except the open paths."""

    def __init__(self, app: ASGIApp, console: Console) -> None:
        self.app = app
        self.console = console

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        session = self.console.sessions.find(request.cookies.get(COOKIE))
        scope["session_record"] = session
        path = request.url.path
        public = path == "/login" or path.startswith("/static/")
        public = public or (path == "/metrics" and self.console.listen.metrics_public)
        if session is None and not public:
            response: Response
            if request.method == "GET" and "text/html" in request.headers.get("accept", ""):
                response = RedirectResponse("/login", status_code=303)
                response.status_code = 303
            else:
                response = PlainTextResponse("log in first: /login\n", status_code=401)
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


def session_of(request: Request) -> Session:
    session = request.scope.get("session_record")
    if not isinstance(session, Session):
        raise HTTPException(401, "log in first")
    return session


async def form(request: Request, expected: str | None = None) -> dict[str, str]:
    """The POSTed form, after its CSRF token matched ``expected`` (the session's when
    None). Refused (403) without one, with a wrong one, or when the body is too large."""
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            raise HTTPException(413, "form too large")
    fields = dict(parse_qsl(body.decode("utf-8", errors="replace"), keep_blank_values=True))
    given = fields.get(CSRF_FIELD) or request.headers.get(CSRF_HEADER)
    wanted = expected if expected is not None else session_of(request).csrf
    if not given or not hmac.compare_digest(wanted.encode(), given.encode()):
        raise HTTPException(403, "missing or wrong CSRF token: reload the page and try again")
    return fields


def login_page(console: Console, request: Request, error: str | None = None) -> Response:
    pre = secrets.token_urlsafe(24)
    response = console.pages.page(
        request,
        "login.html",
        status_code=401 if error else 200,
        login_csrf=pre,
        error=error,
    )
    response.set_cookie(
        LOGIN_COOKIE, pre, max_age=600, httponly=True, samesite="strict", secure=_secure(console)
    )
    return response


def logged_in(console: Console) -> Response:
    session = console.sessions.start()
    # Redirected, so the token in a login URL leaves the address bar at once.
    response = RedirectResponse("/", status_code=303)
    response.set_cookie(
        COOKIE, session.id, httponly=True, samesite="strict", secure=_secure(console), path="/"
    )
    response.delete_cookie(LOGIN_COOKIE)
    return response


async def login_get(console: Console, request: Request) -> Response:
    given = request.query_params.get("token")
    if given is None:
        return login_page(console, request)
    if token_matches(console.token, given):
        return logged_in(console)
    return login_page(console, request, "that token is not this console's")


async def login_post(console: Console, request: Request) -> Response:
    fields = await form(request, request.cookies.get(LOGIN_COOKIE) or secrets.token_hex(16))
    if token_matches(console.token, fields.get("token", "").strip()):
        return logged_in(console)
    return login_page(console, request, "that token is not this console's")


async def logout(console: Console, request: Request) -> Response:
    session = session_of(request)
    await form(request)
    console.sessions.end(session.id)
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(COOKIE, path="/")
    return response


def _secure(console: Console) -> bool:
    return console.listen.tls
