"""Start the studio: a socket on 127.0.0.1 (never another address), a fresh token, the URL
printed, uvicorn serving the app until Ctrl-C."""

from __future__ import annotations

import secrets
import socket
from collections.abc import Callable
from typing import Any

from evalkit.errors import BadConfig, Problem
from evalkit.studio.project import StudioProject

__all__ = ["HOST", "bind", "serve", "studio_url"]

HOST = "127.0.0.1"  # loopback only: there is no option for another address


def bind(port: int = 0) -> socket.socket:
    """A listening socket on 127.0.0.1:`port` (0: a free port the OS picks).

    Raises:
        BadConfig: the port is taken or not allowed.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((HOST, port))
    except OSError as e:
        sock.close()
        raise BadConfig(Problem(f"cannot listen on {HOST}:{port} ({e.strerror}); pick another --port, or 0 for any", field="--port")) from None
    sock.listen(64)
    return sock


def studio_url(port: int, token: str) -> str:
    """The URL to open: it carries the token, which the first visit turns into a cookie."""
    return f"http://{HOST}:{port}/?token={token}"


def serve(project: StudioProject, *, port: int = 0, on_ready: Callable[[str], Any] = print, token: str | None = None,
          live: Any = None) -> None:
    """Serve `project` until interrupted.

    Args:
        project: what to serve.
        port: the port (0: any free one).
        on_ready: called with the URL (token included) once the socket listens.
        token: the secret (default: a new random one; tests pass their own).
        live: the chatbot a case page may ask now (asking.LiveTarget), or None.
    """
    import uvicorn

    from evalkit.studio.app import create_app

    sock = bind(port)
    port = sock.getsockname()[1]
    token = token or secrets.token_urlsafe(32)
    app = create_app(project, token=token, port=port, live=live)
    # proxy_headers off: no X-Forwarded-* is believed; server_header off: nothing to fingerprint
    config = uvicorn.Config(app, log_level="warning", proxy_headers=False, server_header=False, date_header=False,
                            access_log=False, lifespan="off")
    server = uvicorn.Server(config)
    on_ready(studio_url(port, token))
    server.run(sockets=[sock])
