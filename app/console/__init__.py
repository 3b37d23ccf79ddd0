"""The web console: static HTML/CSS/JS served at /console that calls the same /v1 API.

Nothing here reads the database: the page asks the API with the key the user typed in, so it
can show nothing that key may not see. The files ship inside the package (no build step, no
network at run time), and every response carries a Content-Security-Policy that lets the page
load and call only its own origin.
"""

from __future__ import annotations

from pathlib import Path

from starlette.staticfiles import StaticFiles
from starlette.types import Message, Receive, Scope, Send

STATIC_DIR = Path(__file__).parent / "static"

# Same origin only: scripts, styles, images and API calls. No inline script, no frames.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'none'; base-uri 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS = [
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    # The files change with the package; revalidating keeps an upgraded console consistent.
    (b"cache-control", b"no-cache"),
]


class _ConsoleFiles(StaticFiles):
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                names = {name for name, _ in SECURITY_HEADERS}
                headers = [(k, v) for k, v in message.get("headers", []) if k not in names]
                message["headers"] = headers + SECURITY_HEADERS
            await send(message)

        await super().__call__(scope, receive, with_headers)


def static_app() -> StaticFiles:
    """The console's files, `index.html` at the mount's root."""
    return _ConsoleFiles(directory=STATIC_DIR, html=True)
