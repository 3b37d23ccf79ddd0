"""`privclust api`: run the HTTP API with uvicorn."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("api", help="run the HTTP API (PRIVCLUST_HOST:PRIVCLUST_PORT)")
    p.add_argument("--host", help="override PRIVCLUST_HOST")
    p.add_argument("--port", type=int, help="override PRIVCLUST_PORT")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from app.config import get_settings
    from app.main import create_app

    settings = get_settings()
    uvicorn.run(
        create_app(settings),
        host=args.host or settings.host,
        port=args.port or settings.port,
        log_level="info",
        proxy_headers=True,
        timeout_graceful_shutdown=5,
    )
    return 0
