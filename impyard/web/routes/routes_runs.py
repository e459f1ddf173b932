"""Overview and run routes: pages, and their event streams."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from impyard.common.errors import NotFoundError
from impyard.common.names import RUN_ID
from impyard.common.textsafe import StreamEscaper
from impyard.runs.host import follow
from impyard.runs.records import manifest as manifests
from impyard.web.access.console import Console
from impyard.web.pages import overview as overviews
from impyard.web.pages.runpage import run_page
from impyard.web.routes import sse

#: Seconds between the overview stream's looks at the runs and the queue.
OVERVIEW_POLL_SECONDS = 1.0
SSE_HEADERS = {"x-accel-buffering": "no"}


def routes(console: Console) -> list[Route]:
    async def overview_page(request: Request) -> Response:
        found = await run_in_threadpool(
            overviews.overview, console.home, console.settings, console.engines, console.index
        )
        return console.pages.page(request, "overview.html", o=found)

    async def overview_live(request: Request) -> Response:
        return StreamingResponse(
            _overview_events(console, request), media_type="text/event-stream", headers=SSE_HEADERS
        )

    async def run(request: Request) -> Response:
        run_id = _run_id(request)
        try:
            page = await run_in_threadpool(run_page, console.home, run_id)
        except NotFoundError as exc:
            raise HTTPException(404, exc.message) from exc
        return console.pages.page(request, "run.html", p=page)

    async def run_output(request: Request) -> Response:
        run_id = _run_id(request)
        if manifests.read_or_none(console.home, run_id) is None:
            raise HTTPException(404, f"no run {run_id}")
        if not sse.try_follow():
            raise HTTPException(503, "too many followers at once: close another run's page")
        return StreamingResponse(
            _output_events(console, run_id), media_type="text/event-stream", headers=SSE_HEADERS
        )

    return [
        Route("/", overview_page),
        Route("/overview/live", overview_live),
        Route("/runs/{run_id}", run),
        Route("/runs/{run_id}/output", run_output),
    ]


def _run_id(request: Request) -> str:
    run_id = str(request.path_params["run_id"])
    if not RUN_ID.fullmatch(run_id):
        raise HTTPException(404, "no such run")
    return run_id


async def _overview_events(console: Console, request: Request) -> AsyncIterator[str]:
    """The overview's live part as an HTML fragment (rendered with autoescape), sent
    whenever it changes; a comment now and then otherwise."""
    seen: tuple[object, ...] | None = None
    quiet = 0.0
    while not await request.is_disconnected():
        now = await run_in_threadpool(overviews.live, console.home, console.settings, console.index)
        if now.signature() != seen:
            seen, quiet = now.signature(), 0.0
            yield sse.event("html", console.pages.render("overview_live.html", o=now))
        elif quiet >= sse.KEEPALIVE_SECONDS:
            quiet = 0.0
            yield sse.comment()
        await asyncio.sleep(OVERVIEW_POLL_SECONDS)
        quiet += OVERVIEW_POLL_SECONDS


def _escaped_output(console: Console, run_id: str) -> Callable[[Callable[[], bool]], Iterator[str]]:
    def make(stopped: Callable[[], bool]) -> Iterator[str]:
        escaper = StreamEscaper()
        for chunk in follow.box_output(console.home, run_id, stopped=stopped):
            text = escaper.feed(chunk)
            if text:
                yield text
        rest = escaper.flush()
        if rest:
            yield rest

    return make


async def _output_events(console: Console, run_id: str) -> AsyncIterator[str]:
    """The box's output from its first byte (``follow.box_output``, as ``runs logs -f``
    reads it), escaped; then the run's outcome once it has one."""
    yield sse.event("reset", "")
    async for text in sse.threaded(_escaped_output(console, run_id)):
        yield sse.comment() if text is None else sse.event("output", text)
    ended = await run_in_threadpool(follow.wait_finished, console.home, run_id)
    if ended is not None:
        yield sse.event("end", f"{ended.state}: {ended.checkpoint}")
