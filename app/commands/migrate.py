"""`privclust migrate`: bring the database schema to the newest version and bootstrap an admin."""

from __future__ import annotations

import argparse
import sys

from app.kit.config import Settings, default_password_warning, get_settings


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("migrate", help="apply database migrations (idempotent)")
    p.set_defaults(func=run)


def migrate_and_bootstrap(settings: Settings) -> str | None:
    """Upgrade the schema to head; returns a newly generated admin token, if one was made."""
    from app.keys.service import bootstrap_admin
    from app.kit.db.migrate import upgrade_to_head
    from app.kit.db.session import session_scope

    settings.resolved_data_dir.mkdir(parents=True, exist_ok=True)
    upgrade_to_head(settings.resolved_database_url)
    configured = settings.admin_token.get_secret_value() if settings.admin_token else None
    with session_scope(settings.resolved_database_url) as session:
        return bootstrap_admin(session, configured, settings.resolved_data_dir)


def announce_admin_token(token: str | None, settings: Settings) -> None:
    if token:
        print(
            f"Generated the admin API key (shown once; also saved to "
            f"{settings.resolved_data_dir / 'admin-token'}):\n{token}",
            flush=True,
        )


def run(args: argparse.Namespace) -> int:
    settings = get_settings()
    if warning := default_password_warning(settings):
        print(warning, file=sys.stderr, flush=True)
    token = migrate_and_bootstrap(settings)
    print("database is at the newest schema", flush=True)
    announce_admin_token(token, settings)
    return 0
