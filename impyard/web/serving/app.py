"""The console as an ASGI app: every route behind a session (``auth.RequireSession``),
every response with the security headers (``headers.SecurityHeaders``)."""

from __future__ import annotations

import importlib.resources
from pathlib import Path

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp

from impyard.web.access import auth
from impyard.web.access.console import Console
from impyard.web.routes import routes_knowledge, routes_review, routes_runs
from impyard.web.routes.metrics import metrics_route
from impyard.web.serving.headers import SecurityHeaders


def static_dir() -> Path:
    # Package data: an installed wheel carries console.js and console.css.
    return Path(str(importlib.resources.files("impyard.web").joinpath("static")))


def build_app(console: Console) -> ASGIApp:
    """The console's app, wrapped in the security headers outermost, so even a response
    Starlette makes for an unexpected error (500) carries them."""
    return SecurityHeaders(_starlette(console))


def _starlette(console: Console) -> Starlette:
    async def login_get(request: Request) -> Response:
        return await auth.login_get(console, request)

    async def login_post(request: Request) -> Response:
        return await auth.login_post(console, request)

    async def logout(request: Request) -> Response:
        return await auth.logout(console, request)

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        return console.pages.page(
            request,
            "error.html",
            status_code=exc.status_code,
            code=exc.status_code,
            message=exc.detail,
        )

    routes: list[BaseRoute] = [
        Route("/login", login_get, methods=["GET"]),
        Route("/login", login_post, methods=["POST"]),
        Route("/logout", logout, methods=["POST"]),
        *routes_runs.routes(console),
        *routes_review.routes(console),
        *routes_knowledge.routes(console),
        metrics_route(console),
        Mount("/static", StaticFiles(directory=static_dir()), name="static"),
    ]
    return Starlette(
        routes=routes,
        middleware=[Middleware(auth.RequireSession, console=console)],
        exception_handlers={HTTPException: http_error},
    )
