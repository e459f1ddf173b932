"""Pages rendered from ``impyard.web``'s templates with autoescaping on for every template:
whatever a box wrote (note bodies, paths, commit messages, box output, URLs, journal
fields) reaches the page as text. No template marks box data ``|safe``."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from jinja2 import Environment, PackageLoader, StrictUndefined
from starlette.requests import Request
from starlette.responses import HTMLResponse

from impyard.common.textsafe import escape_text, visible
from impyard.status.units import human_age, human_bytes


def http_url(value: object) -> str | None:
    """``value`` when it is an http(s) URL with a host (then a page may link to it), else
    None: ``javascript:``, ``data:`` and every other scheme is shown as text only."""
    if not isinstance(value, str):
        return None
    try:
        parts = urlsplit(value)
    except ValueError:
        return None
    if parts.scheme.lower() not in ("http", "https") or not parts.netloc:
        return None
    return value


def code_spans(value: object) -> list[tuple[bool, str]]:
    """``value`` cut at its backticks: (True, text) for each `code` span, which a page
    shows in ``<code>`` (each part autoescaped there), (False, text) for the rest; an
    unpaired backtick stays as it is."""
    parts = str(value).split("`")
    if len(parts) % 2 == 0:
        parts[-2:] = ["`".join(parts[-2:])]
    return [(i % 2 == 1, part) for i, part in enumerate(parts) if part]


def environment() -> Environment:
    env = Environment(
        loader=PackageLoader("impyard.web", "templates"),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        {
            "http_url": http_url,
            "code_spans": code_spans,
            "visible": lambda value: visible(str(value)),
            "text": lambda value: escape_text(str(value)),
            "short": lambda value: str(value or "")[:12],
            "bytes": lambda value: human_bytes(int(value or 0)),
            "age": human_age,
        }
    )
    return env


class Pages:
    def __init__(self) -> None:
        self.env = environment()

    def render(self, name: str, **context: Any) -> str:
        return self.env.get_template(name).render(**context)

    def page(
        self, request: Request, name: str, *, status_code: int = 200, **context: Any
    ) -> HTMLResponse:
        session = request.scope.get("session_record")
        body = self.render(
            name, request=request, csrf=session.csrf if session is not None else "", **context
        )
        return HTMLResponse(body, status_code=status_code)
