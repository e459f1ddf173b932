"""Knowledge routes: the imps, one imp's main (tree and history), one note."""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from impyard.errors import ImpyardError, NotFoundError
from impyard.names import check_imp_name
from impyard.web import knowledgepage
from impyard.web.console import Console


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

    return [
        Route("/knowledge", imps_page),
        Route("/knowledge/{imp}", tree_page),
        Route("/knowledge/{imp}/note", note_page),
    ]


def _imp(request: Request) -> str:
    imp = str(request.path_params["imp"])
    try:
        return check_imp_name(imp)
    except ImpyardError as exc:
        raise HTTPException(404, "no such imp") from exc
