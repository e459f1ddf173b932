"""Knowledge routes: the imps, one imp's main (tree and history), one note, and a
purge's preview."""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from impyard.common.errors import ImpyardError, NotFoundError, UsageError
from impyard.common.names import check_imp_name
from impyard.web.access import auth
from impyard.web.access.console import Console
from impyard.web.pages import knowledgepage


def routes(console: Console) -> list[Route]:
    home = console.home

    async def imps_page(request: Request) -> Response:
        found = await run_in_threadpool(knowledgepage.imps, home)
        return console.pages.page(request, "knowledge.html", imps=found)

    async def tree_page(request: Request) -> Response:
        imp = _imp(request)
        path = request.query_params.get("path", "").strip("/")
        try:
            found = await run_in_threadpool(knowledgepage.tree, home, imp, path)
        except NotFoundError as exc:
            raise HTTPException(404, exc.message) from exc
        return console.pages.page(request, "knowledge_tree.html", t=found)

    async def note_page(request: Request) -> Response:
        imp = _imp(request)
        path = request.query_params.get("path", "")
        try:
            found = await run_in_threadpool(knowledgepage.note, home, imp, path)
        except NotFoundError as exc:
            raise HTTPException(404, exc.message) from exc
        return console.pages.page(request, "knowledge_note.html", n=found)

    async def purge_form(request: Request) -> Response:
        imp = _imp(request)
        return console.pages.page(request, "knowledge_purge.html", imp=imp, p=None, error=None)

    async def purge_preview(request: Request) -> Response:
        """The purge's dry run (it reads only, beside serve); the purge itself runs with
        serve stopped, so the page gives its command instead of a button."""
        from impyard.purge.purge import purge
        from impyard.purge.selector import KINDS, Selector

        imp = _imp(request)
        fields = await auth.form(request)
        kind, value = fields.get("kind", ""), fields.get("value", "")
        shown, error = None, None
        try:
            if kind not in KINDS:
                raise UsageError(f"choose what to purge: one of {', '.join(KINDS)}")
            selector = Selector(kind, value)
            report = await run_in_threadpool(purge, home, imp, selector, dry_run=True)
            shown = report.as_dict()
        except ImpyardError as exc:
            error = exc.message
        return console.pages.page(
            request, "knowledge_purge.html", imp=imp, p=shown, kind=kind, error=error
        )

    return [
        Route("/knowledge", imps_page),
        Route("/knowledge/{imp}", tree_page),
        Route("/knowledge/{imp}/note", note_page),
        Route("/knowledge/{imp}/purge", purge_form, methods=["GET"]),
        Route("/knowledge/{imp}/purge", purge_preview, methods=["POST"]),
    ]


def _imp(request: Request) -> str:
    imp = str(request.path_params["imp"])
    try:
        return check_imp_name(imp)
    except ImpyardError as exc:
        raise HTTPException(404, "no such imp") from exc
