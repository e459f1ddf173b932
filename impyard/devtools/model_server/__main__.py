"""``python -m impyard.devtools.model_server [--protocol NAME] [--host H] [--port P]``:
serve the ``note`` script and print the base URL an agent's route points at."""

from __future__ import annotations

import argparse
import sys
import threading

from impyard.devtools.model_server.protocols import PROTOCOLS
from impyard.devtools.model_server.script import note_script
from impyard.devtools.model_server.server import ModelServer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m impyard.devtools.model_server",
        description="Serve a scripted model (the note script) over a model API.",
    )
    parser.add_argument("--protocol", choices=sorted(PROTOCOLS), default="openai-chat")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    server = ModelServer(note_script(), host=args.host, port=args.port, protocol=args.protocol)
    server.start()
    print(server.url, flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
