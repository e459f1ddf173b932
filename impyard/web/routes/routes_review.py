"""Review routes: the queue, one item with its diff, a preview per action (its dry run;
rework's with the note given as ``?note=``), and the POST that does it."""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from impyard.common.errors import ImpyardError, NotFoundError
from impyard.common.names import RUN_ID
from impyard.repair.preserved import Kind
from impyard.web.access import auth
from impyard.web.access.console import Console
from impyard.web.pages import review

#: Longest rework note the console takes (the CLI's ``--note`` has no such bound).
MAX_NOTE_CHARS = 4000


def routes(console: Console) -> list[Route]:
    home = console.home

    async def queue_page(request: Request) -> Response:
        found = await run_in_threadpool(review.queue, home)
        return console.pages.page(request, "review.html", q=found)

    async def item_page(request: Request) -> Response:
        kind, run_id = _target(request)
        try:
            found = await run_in_threadpool(review.item, home, kind, run_id)
        except NotFoundError as exc:
            raise HTTPException(404, exc.message) from exc
        actions = review.actions_for(found)
        return console.pages.page(request, "review_item.html", i=found, actions=actions)

    async def confirm_page(request: Request) -> Response:
        kind, run_id = _target(request)
        action = _action(request)
        note = _note(request.query_params.get("note"))
        try:
            shown = await run_in_threadpool(
                review.preview, home, console.settings, kind, run_id, action, note
            )
        except NotFoundError as exc:
            raise HTTPException(404, exc.message) from exc
        return console.pages.page(request, "review_confirm.html", p=shown)

    async def do(request: Request) -> Response:
        fields = await auth.form(request)
        kind, run_id = _target(request)
        action = _action(request)
        note = _note(fields.get("note"))
        try:
            result = await run_in_threadpool(
                review.act, home, console.settings, kind, run_id, action, note
            )
            error = None
        except ImpyardError as exc:
            result, error = {}, exc.message
        return console.pages.page(
            request,
            "review_done.html",
            status_code=200 if error is None else 409,
            action=action,
            kind=kind,
            run_id=run_id,
            result=result,
            error=error,
        )

    return [
        Route("/review", queue_page),
        Route("/review/{kind}/{run_id}", item_page),
        Route("/review/{kind}/{run_id}/{action}", confirm_page, methods=["GET"]),
        Route("/review/{kind}/{run_id}/{action}", do, methods=["POST"]),
    ]


def _target(request: Request) -> tuple[Kind, str]:
    kind, run_id = str(request.path_params["kind"]), str(request.path_params["run_id"])
    if kind not in review.KINDS or not RUN_ID.fullmatch(run_id):
        raise HTTPException(404, "no such candidate or quarantine")
    return kind, run_id


def _action(request: Request) -> review.Action:
    action = str(request.path_params["action"])
    if action not in review.ACTIONS:
        raise HTTPException(404, f"no action {action!r}")
    return action


def _note(text: str | None) -> str | None:
    """Rework's note (None: no note); a longer one than a page should carry is refused."""
    if text is None or not text.strip():
        return None
    if len(text) > MAX_NOTE_CHARS:
        raise HTTPException(413, f"the note is longer than {MAX_NOTE_CHARS} characters")
    return text
