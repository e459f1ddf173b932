"""What the request helpers (forward, tunnel, inspect, control) see of the box's
connection and of its run's gateway.

The server creates a handler per connection and the handler calls the helpers, so
imports flow server -> handler -> helpers: a helper is given a ``Client`` (the
handler answers to it) and never imports the handler or the server back.
"""

from __future__ import annotations

import socket
import ssl
from contextlib import AbstractContextManager
from email.message import Message
from io import BufferedIOBase
from typing import Protocol

from impyard.gateway.guard.budget import RunBudget
from impyard.gateway.provenance.archive_intake import RunArchive
from impyard.gateway.provenance.receipts import ReceiptLog
from impyard.gateway.proxy.framing import Framing
from impyard.home import Home
from impyard.policy.models import GatewayPolicy


class RunGateway(Protocol):
    """One run's gateway as a request sees it: its rules, budget, receipts and limits."""

    @property
    def policy(self) -> GatewayPolicy: ...

    @property
    def home(self) -> Home: ...

    @property
    def run_id(self) -> str: ...

    @property
    def budget(self) -> RunBudget: ...

    @property
    def receipts(self) -> ReceiptLog: ...

    @property
    def archive(self) -> RunArchive | None: ...

    @property
    def client_timeout(self) -> float: ...

    @property
    def upstream_timeout(self) -> float: ...

    @property
    def tunnel_idle_timeout(self) -> float: ...

    @property
    def upstream_tls(self) -> ssl.SSLContext: ...

    @property
    def stopping(self) -> bool: ...

    def tracked(self, sock: socket.socket) -> AbstractContextManager[socket.socket]:
        """Cut ``sock`` when the gateway closes, while the block runs."""
        ...


class Client(Protocol):
    """The box's connection, mid-request: its head already read, its answer still to
    write (``responded`` says whether a status line went out)."""

    close_connection: bool
    responded: bool

    @property
    def gateway(self) -> RunGateway: ...

    @property
    def connection(self) -> socket.socket: ...

    @property
    def rfile(self) -> BufferedIOBase: ...

    @property
    def wfile(self) -> BufferedIOBase: ...

    @property
    def headers(self) -> Message: ...

    @property
    def request_version(self) -> str: ...

    @property
    def framing(self) -> Framing | None: ...

    def send_response_only(self, code: int, message: str | None = None) -> None: ...

    def send_header(self, keyword: str, value: str) -> None: ...

    def end_headers(self) -> None: ...
