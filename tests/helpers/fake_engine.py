"""A stand-in Docker engine for unit tests that only need to ask whether an image is
there (``imp create|set --image``): it answers ``GET /images/<name>/json`` as an engine
does, found or ``No such image``, and nothing else. Docker-marked tests use the real one."""

from __future__ import annotations

import hashlib
import http.server
import json
import threading
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager

#: Image names these tests give imps; the stand-in engine has them all.
TEST_IMAGES = ("img:1", "img:2", "mine:2")


def _handler(images: frozenset[str]) -> type[http.server.BaseHTTPRequestHandler]:
    class ImagesOnly(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            parts = urllib.parse.urlsplit(self.path).path.split("/")
            # /v1.41/images/<name>/json
            if len(parts) == 5 and parts[2] == "images" and parts[4] == "json":
                name = urllib.parse.unquote(parts[3])
                if name in images:
                    digest = hashlib.sha256(name.encode()).hexdigest()
                    return self._answer(200, {"Id": f"sha256:{digest}", "RepoTags": [name]})
                return self._answer(404, {"message": f"No such image: {name}"})
            return self._answer(404, {"message": "page not found"})

        def _answer(self, status: int, body: dict[str, object]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:
            del format, args

    return ImagesOnly


@contextmanager
def engine_with_images(images: tuple[str, ...] = TEST_IMAGES) -> Iterator[dict[str, str]]:
    """The environment (``DOCKER_HOST``) of an engine holding exactly ``images``."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(frozenset(images)))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield {"DOCKER_HOST": f"tcp://127.0.0.1:{server.server_address[1]}"}
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
