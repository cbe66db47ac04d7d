"""Who may talk to the studio: the browser that opened the printed URL, from this machine.

`Guard` is an ASGI middleware in front of every route. In order:

1. The Host header must name the studio's own address (127.0.0.1:PORT or localhost:PORT):
   a page elsewhere that points its own domain at 127.0.0.1 (DNS rebinding) gets 403.
2. A request a browser marks as cross-site (an `Origin` that is not ours, or
   `Sec-Fetch-Site` other than same-origin / none) gets 403.
3. The per-start token: `?token=` on a GET (the printed URL) sets an HttpOnly, SameSite=Strict
   cookie and redirects to the same page without it; later requests carry the cookie. No
   token, a wrong one, or one in the URL of a POST: 403.
4. A write (POST; every other method is 405) must also come from our own page's script: an
   `Origin` of ours, a JSON body, and the `X-Studio-CSRF` header holding the value the page
   was given (a hash of the token: a form on another site can send none of these).

Every response gets the security headers (`HEADERS`): a Content-Security-Policy stricter
than the reports' (scripts and styles only from the studio itself, no inline script at all,
no request to anywhere else), nosniff, no referrer, no framing, no caching.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import parse_qsl, urlencode

__all__ = ["COOKIE", "CSP", "CSRF_HEADER", "Guard", "csrf_value"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]], Awaitable[None]]

COOKIE = "evalkit_studio"
CSRF_HEADER = "x-studio-csrf"
# The reports' policy (report/html/templates/base.html.j2) forbids every request; a served
# page needs its own origin for the script, the stylesheet and the edits, and nothing inline.
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cache-control", b"no-store"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
]


def csrf_value(token: str) -> str:
    """The value a page's script sends in X-Studio-CSRF: derived from the token, not the token."""
    return hmac.new(token.encode(), b"evalkit studio csrf", hashlib.sha256).hexdigest()


class Guard:
    """The checks above, around `app`.

    Args:
        app: the Starlette app.
        token: this start's secret.
        port: the port the studio listens on (the Host and Origin it answers to).
    """

    def __init__(self, app: ASGIApp, *, token: str, port: int):
        self.app = app
        self.token = token
        self.csrf = csrf_value(token)
        self.hosts = {f"127.0.0.1:{port}", f"localhost:{port}"}
        self.origins = {f"http://{h}" for h in self.hosts}
        self.cookie = f"{COOKIE}_{port}"  # one per port: two studios on one machine keep their own

    async def __call__(self, scope: Scope, receive: Callable[[], Awaitable[Message]], send: Callable[[Message], Awaitable[None]]) -> None:
        if scope["type"] != "http":
            if scope["type"] == "websocket":  # none are served
                await send({"type": "websocket.close", "code": 1008})
                return
            await self.app(scope, receive, send)
            return

        async def secured(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *HEADERS]
            await send(message)

        refusal = self._refusal(scope)
        if refusal is not None:
            status, text = refusal
            await _plain(secured, status, text)
            return
        query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True))
        if "token" in query:  # the printed URL: keep the token in a cookie, not in the address bar or history
            rest = urlencode([(k, v) for k, v in parse_qsl(scope["query_string"].decode("latin-1"), keep_blank_values=True) if k != "token"])
            location = scope.get("path", "/") + (f"?{rest}" if rest else "")
            await secured({"type": "http.response.start", "status": 303, "headers": [
                (b"location", location.encode("latin-1")),
                (b"set-cookie", f"{self.cookie}={self.token}; HttpOnly; SameSite=Strict; Path=/".encode()),
                (b"content-length", b"0"),
            ]})
            await secured({"type": "http.response.body", "body": b""})
            return
        await self.app(scope, receive, secured)

    def _refusal(self, scope: Scope) -> tuple[int, str] | None:
        """(status, why) when the request is refused, else None."""
        headers: dict[str, str] = {}
        for k, v in scope.get("headers", []):
            name = k.decode("latin-1").lower()
            if name in headers:  # a repeated Host/Origin/Cookie: not something our page sends
                if name in ("host", "origin", CSRF_HEADER, "sec-fetch-site"):
                    return 400, f"repeated {name} header"
                headers[name] += "; " + v.decode("latin-1") if name == "cookie" else ""
                continue
            headers[name] = v.decode("latin-1")
        if headers.get("host") not in self.hosts:
            return 403, "refused: this studio answers only at its own address (127.0.0.1)"
        origin = headers.get("origin")
        if origin is not None and origin not in self.origins:
            return 403, "refused: a request from another origin"
        if headers.get("sec-fetch-site", "same-origin") not in ("same-origin", "none"):
            return 403, "refused: a cross-site request"
        method = scope.get("method", "GET")
        query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True))
        if method in ("GET", "HEAD") and "token" in query:
            return None if _same(query["token"], self.token) else (403, "refused: wrong token; open the URL "
                                                                                     "`evalkit serve-studio` printed")
        if not self._has_cookie(headers.get("cookie", "")):
            return 403, "refused: no token; open the URL `evalkit serve-studio` printed (it carries the token)"
        if method in ("GET", "HEAD"):
            return None
        if method != "POST":
            return 405, "method not allowed"
        if origin is None:
            return 403, "refused: a write without an Origin header"
        if not _same(headers.get(CSRF_HEADER, ""), self.csrf):
            return 403, "refused: a write without the page's CSRF value"
        if headers.get("content-type", "").split(";")[0].strip().lower() != "application/json":
            return 415, "refused: a write must be JSON"
        return None

    def _has_cookie(self, raw: str) -> bool:
        for part in raw.split(";"):
            name, _, value = part.strip().partition("=")
            if name == self.cookie and _same(value, self.token):
                return True
        return False


def _same(given: str, secret: str) -> bool:
    """A constant-time comparison that takes any text (compare_digest refuses non-ASCII str)."""
    return hmac.compare_digest(given.encode("utf-8", "surrogatepass"), secret.encode("utf-8"))


async def _plain(send: Callable[[Message], Awaitable[None]], status: int, text: str) -> None:
    body = (text + "\n").encode()
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode()),
    ]})
    await send({"type": "http.response.body", "body": body})
