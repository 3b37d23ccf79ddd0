"""`privclust keys create|list|revoke`: manage API keys directly in the database."""

from __future__ import annotations

import argparse
import uuid

from app.models import Role


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("keys", help="create, list or revoke API keys")
    sub = p.add_subparsers(dest="keys_command", metavar="ACTION", required=True)
    c = sub.add_parser("create", help="create a key; prints the secret alone on the last line")
    c.add_argument("--tenant", required=True)
    c.add_argument("--role", required=True, choices=[role.value for role in Role])
    c.add_argument("--dataset", type=uuid.UUID, help="the dataset a member key serves")
    c.set_defaults(func=run_create)
    ls = sub.add_parser("list", help="list keys (never their secrets)")
    ls.add_argument("--tenant")
    ls.set_defaults(func=run_list)
    r = sub.add_parser("revoke", help="revoke a key by id")
    r.add_argument("key_id", type=uuid.UUID)
    r.set_defaults(func=run_revoke)


def _db_url() -> str:
    from app.commands.migrate import migrate_and_bootstrap
    from app.kit.config import get_settings

    settings = get_settings()
    migrate_and_bootstrap(settings)
    return settings.resolved_database_url


def run_create(args: argparse.Namespace) -> int:
    from app.keys.service import create_key
    from app.kit.db.session import session_scope

    with session_scope(_db_url()) as session:
        created = create_key(session, tenant=args.tenant, role=args.role, dataset_id=args.dataset)
    print(
        f"created {created.key.role} key {created.key.id} for tenant {created.key.tenant}; "
        "the secret is shown only now:"
    )
    print(created.secret)
    return 0


def run_list(args: argparse.Namespace) -> int:
    from app.keys.service import list_keys
    from app.kit.db.session import session_scope

    with session_scope(_db_url()) as session:
        cursor: str | None = None
        while True:
            items, cursor = list_keys(session, 200, cursor, args.tenant)
            for k in items:
                state = f"revoked {k.revoked_at:%Y-%m-%d}" if k.revoked_at else "active"
                print(f"{k.id}  {k.tenant:<20} {k.role:<8} {k.prefix}…  {state}")
            if cursor is None:
                return 0


def run_revoke(args: argparse.Namespace) -> int:
    from app.keys.service import revoke_key
    from app.kit.db.session import session_scope

    with session_scope(_db_url()) as session:
        revoke_key(session, args.key_id)
    print(f"revoked {args.key_id}")
    return 0
