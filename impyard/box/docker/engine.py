"""The one entry point to the Docker engine's API.

Every engine call goes through :func:`call`, which logs it, retries transient
failures (5xx answers, connections reset mid-request) a bounded number of
times, and translates transport failures into ``ImpyardError`` subclasses that
carry their evidence. The API is spoken directly over HTTP (``engineapi`` on
``enginehttp``): the docker SDK and requests cost ~60 ms to import, a sixth of a
foreground run. Image lifecycle and ``check box`` go through python-on-whales, the
CLI's twin.
"""

from __future__ import annotations

import atexit
import contextlib
import http.client
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from impyard.box.docker.engineapi import EngineAPI
from impyard.box.docker.enginehttp import (
    EngineConnectError,
    EngineHTTPError,
    EngineTimeout,
    NotAnEngineAnswer,
    Transport,
)
from impyard.common.errors import EngineError, ImageNotFoundError, NotFoundError

log = logging.getLogger(__name__)

T = TypeVar("T")

#: The API version we speak. Pinning it skips version negotiation (one extra
#: round trip per process) and 1.41 (engine 20.10) has every feature boxes
#: use. ``DOCKER_API_VERSION`` overrides it.
DEFAULT_API_VERSION = "1.41"
DEFAULT_DOCKER_HOST = "unix:///var/run/docker.sock"
#: Attempts for calls that fail transiently (first try included).
RETRY_ATTEMPTS = 3


def stderr_tail(text: str, lines: int = 3) -> str:
    """The last non-blank lines of a docker CLI's stderr, on one line: the evidence an
    error message carries."""
    return " | ".join(line for line in text.strip().splitlines()[-lines:] if line.strip())


class EngineUnreachableError(EngineError):
    """The engine did not accept a connection at all."""

    def __init__(self, url: str, reason: str, message: str | None = None) -> None:
        super().__init__(message or f"cannot reach the Docker engine at {url}: {reason}")
        self.url = url
        self.reason = reason


class EngineNotDockerError(EngineUnreachableError):
    """Something answers at the engine's address, but not as a Docker engine does (a web
    server, a proxy's error page): no engine is reachable there."""

    def __init__(self, url: str, reason: str) -> None:
        message = f"the address {url} does not answer as a Docker engine ({reason})"
        super().__init__(url, reason, message)


class EngineCallError(EngineError):
    """The engine answered a request with an error (or not in time)."""

    def __init__(
        self,
        message: str,
        *,
        call: str,
        status: int | None = None,
        explanation: str | None = None,
        container_id: str | None = None,
        image: str | None = None,
    ) -> None:
        super().__init__(message)
        self.call = call
        self.status = status
        self.explanation = explanation
        self.container_id = container_id
        self.image = image


class BoxImageNotFoundError(ImageNotFoundError):
    def __init__(self, image: str) -> None:
        super().__init__(
            f"image {image} is not in the local Docker engine and cannot be pulled here"
            " (no registry): build it with `just box`"
        )
        self.image = image


class EngineObjectNotFoundError(NotFoundError):
    """A container or volume named in a call does not exist (any more)."""

    def __init__(self, kind: str, name: str, explanation: str) -> None:
        super().__init__(f"no such {kind} {name}: {explanation}")
        self.kind = kind
        self.name = name


_lock = threading.Lock()
_client: tuple[tuple[str, str, float], EngineAPI] | None = None
_default_timeout: float | None = None


def engine_url() -> str:
    """The engine address as a person would write it (for messages)."""
    return os.environ.get("DOCKER_HOST") or DEFAULT_DOCKER_HOST


def set_default_timeout(seconds: float) -> None:
    """Per-call API timeout for clients created from now on (else ``Settings``)."""
    global _default_timeout
    _default_timeout = seconds


@contextlib.contextmanager
def timeout_within(seconds: float) -> Iterator[None]:
    """Engine calls in the block give up after ``seconds`` (a screen an owner waits on must
    not hang on a stuck engine); the previous default is back afterwards."""
    global _default_timeout
    saved = _default_timeout
    _default_timeout = seconds
    try:
        yield
    finally:
        _default_timeout = saved


def _timeout() -> float:
    global _default_timeout
    if _default_timeout is None:
        # Read once: building Settings parses the environment, too slow per call.
        from impyard.settings import load_settings

        _default_timeout = load_settings().docker_timeout_seconds
    return _default_timeout


def api() -> EngineAPI:
    """The cached API client for the current ``DOCKER_HOST``, API version and timeout.

    Constructing it does not touch the engine; the first call does.
    """
    global _client
    key = (
        engine_url(),
        os.environ.get("DOCKER_API_VERSION") or DEFAULT_API_VERSION,
        _timeout(),
    )
    with _lock:
        if _client is not None and _client[0] == key:
            return _client[1]
        try:
            new = EngineAPI(Transport(*key))
        except (ValueError, OSError) as exc:  # e.g. a malformed DOCKER_HOST or TLS files
            raise EngineUnreachableError(key[0], str(exc)) from exc
        if _client is not None:
            _client[1].close()
        _client = (key, new)
        return new


def reset_client() -> None:
    """Drop the cached client (tests; after fork)."""
    global _client
    with _lock:
        if _client is not None:
            _client[1].close()
        _client = None


# Idle kept-alive connections are closed at exit, not left to the collector.
atexit.register(reset_client)


def _is_reset(exc: BaseException) -> bool:
    """A connection dropped mid-request (worth retrying), not one that was never made."""
    return isinstance(exc, ConnectionResetError | BrokenPipeError | http.client.RemoteDisconnected)


def is_transient(exc: BaseException, *, server_errors: bool = True) -> bool:
    """5xx answers and reset connections; never 4xx, refused connections or timeouts."""
    if isinstance(exc, EngineHTTPError):
        return server_errors and exc.is_server_error
    return _is_reset(exc)


#: What an engine call may raise that ``translate`` turns into an ImpyardError.
ENGINE_FAILURES = (
    NotAnEngineAnswer,
    EngineHTTPError,
    EngineConnectError,
    EngineTimeout,
    OSError,
    http.client.HTTPException,
)


def translate(
    exc: BaseException,
    what: str,
    *,
    container_id: str | None = None,
    image: str | None = None,
    volume: str | None = None,
) -> Exception:
    """The ImpyardError for a failed engine call ``what``."""
    if isinstance(exc, NotAnEngineAnswer):
        return EngineNotDockerError(exc.url, f"{what}: {exc}")
    if isinstance(exc, EngineHTTPError):
        explanation = exc.explanation
        if exc.status == 404:
            if "no such image" in explanation.lower():
                return BoxImageNotFoundError(image or explanation.split(":", 1)[-1].strip())
            if volume is not None:
                return EngineObjectNotFoundError("volume", volume, explanation)
            return EngineObjectNotFoundError("container", container_id or "?", explanation)
        return EngineCallError(
            f"docker {what} failed (HTTP {exc.status}): {explanation}",
            call=what,
            status=exc.status,
            explanation=explanation,
            container_id=container_id,
            image=image,
        )
    if isinstance(exc, EngineTimeout | TimeoutError):
        return EngineCallError(
            f"the Docker engine at {engine_url()} did not answer {what} in time",
            call=what,
            container_id=container_id,
            image=image,
        )
    if isinstance(exc, EngineConnectError):
        return EngineUnreachableError(exc.url, exc.reason)
    if isinstance(exc, OSError):
        reason = (exc.strerror or str(exc) or type(exc).__name__).lower()
        return EngineUnreachableError(engine_url(), f"connection lost during {what}: {reason}")
    if isinstance(exc, http.client.HTTPException):
        return EngineCallError(
            f"docker {what} failed: the engine's answer was not HTTP ({type(exc).__name__})",
            call=what,
            container_id=container_id,
            image=image,
        )
    return exc if isinstance(exc, Exception) else RuntimeError(str(exc))


def call(
    what: str,
    fn: Callable[..., T],
    *args: Any,
    retry_server_errors: bool = True,
    container_id: str | None = None,
    image: str | None = None,
    volume: str | None = None,
    **kwargs: Any,
) -> T:
    """Run one engine call: log it, retry transient failures, translate errors.

    ``retry_server_errors=False`` for calls whose 5xx answers are deterministic
    (container start: a bad mount or missing executable fails the same way
    every time) so only reset connections are retried.
    """

    def failed(exc: BaseException) -> Exception:
        return translate(exc, what, container_id=container_id, image=image, volume=volume)

    log.debug("docker %s %s", what, container_id or image or volume or "")
    try:
        return fn(*args, **kwargs)
    except ENGINE_FAILURES as exc:
        if not is_transient(exc, server_errors=retry_server_errors):
            raise failed(exc) from exc
        _log_retry(what, 1, exc)
    # Only a transient failure loads tenacity: the first attempt is every call's path.
    from tenacity import (
        Retrying,
        retry_if_exception,
        stop_after_attempt,
        wait_exponential,
    )

    retrying = Retrying(
        stop=stop_after_attempt(RETRY_ATTEMPTS - 1),
        wait=wait_exponential(multiplier=0.1, max=2),
        retry=retry_if_exception(lambda e: is_transient(e, server_errors=retry_server_errors)),
        before_sleep=lambda state: _log_retry(
            what, state.attempt_number + 1, state.outcome.exception() if state.outcome else None
        ),
        reraise=True,
    )
    time.sleep(0.1)
    try:
        return retrying(fn, *args, **kwargs)
    except ENGINE_FAILURES as exc:
        raise failed(exc) from exc


def _log_retry(what: str, attempt: int, exc: BaseException | None) -> None:
    log.warning(
        "docker %s: transient failure (attempt %d/%d), retrying: %s",
        what,
        attempt,
        RETRY_ATTEMPTS,
        exc,
    )


#: Where dockerd records its pid by default (``--pidfile``).
DAEMON_PIDFILE = Path("/var/run/docker.pid")


def engine_key() -> str:
    """A cheap identity of the running engine, to key what it was found to support.

    For a local daemon: the socket address plus the daemon's pid and process start time
    (two small file reads, no engine call): a restart, the only way its storage or mount
    support changes, changes the key. Otherwise the address plus ``/version`` (a cheap
    endpoint; ``info`` is the slowest). A stale key is caught at use anyway: a failed
    overlay mount falls back and re-probes."""
    url = engine_url()
    if url.startswith("unix://"):
        started = _local_daemon_start()
        if started is not None:
            return f"{url}|{started}"
    version = call("version", api().version)
    parts = (version.get(k, "") for k in ("Version", "ApiVersion", "KernelVersion", "Os"))
    return "|".join([url, *map(str, parts)])


def _local_daemon_start() -> str | None:
    """``pid=<n>,start=<ticks>`` of the local dockerd, or None when it cannot be told."""
    try:
        pid = int(DAEMON_PIDFILE.read_text().strip())
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, ValueError):
        return None
    name = stat[stat.find("(") + 1 : stat.rfind(")")]
    if name != "dockerd":
        return None
    # Field 22 (start time in clock ticks since boot), counted after the ")".
    fields = stat[stat.rfind(")") + 2 :].split()
    return f"pid={pid},start={fields[19]}" if len(fields) > 19 else None
