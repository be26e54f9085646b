"""``openrealtime users …`` and ``openrealtime tokens …``: accounts from the command line.

The commands open the same database the server uses (``DATABASE_URL``, or the embedded server
under ``--data-dir``, reused when a server runs on it), apply the migrations, do one thing and
exit. Output is tab-separated with a header line, for scripts; ``tokens issue`` prints the new
token once, alone on its last line. Errors go to stderr as ``openrealtime: <code>: <message>``
with exit status 1 (2 for usage errors). A revocation made here reaches a running server's
live sessions through the database (``accounts/postgres_store.py``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from accounts.errors import AccountError, TokenNotFound
from accounts.model import MAX_EXPIRY_DAYS, MEMBERSHIP_ROLES, SCOPES, Membership, TokenInfo
from accounts.postgres_store import PostgresAccountStore
from runtime.config import Settings
from runtime.database import DatabaseError, open_database
from runtime.migrations import MigrationError, apply_migrations

Command = Callable[[PostgresAccountStore, argparse.Namespace], Awaitable[None]]


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    users = sub.add_parser("users", help="manage users and their membership roles")
    users_sub = users.add_subparsers(dest="action", required=True)
    add = users_sub.add_parser("add", help="add a user to a tenant")
    add.add_argument("user")
    add.add_argument("--tenant", default="local")
    add.add_argument("--role", choices=MEMBERSHIP_ROLES, default="member")
    listing = users_sub.add_parser("list", help="list a tenant's users")
    listing.add_argument("--tenant", default="local")
    disable = users_sub.add_parser("disable", help="disable a user (their tokens stop at once)")
    disable.add_argument("user")
    disable.add_argument("--tenant", default="local")
    role = users_sub.add_parser("role", help="change a user's membership role")
    role.add_argument("user")
    role.add_argument("role", choices=MEMBERSHIP_ROLES)
    role.add_argument("--tenant", default="local")

    tokens = sub.add_parser("tokens", help="issue, list and revoke bearer tokens")
    tokens_sub = tokens.add_subparsers(dest="action", required=True)
    issue = tokens_sub.add_parser("issue", help="issue a token (printed once, on the last line)")
    issue.add_argument("user")
    issue.add_argument("--tenant", default="local")
    issue.add_argument("--name", default="cli")
    issue.add_argument("--expires-days", type=int, metavar="D")
    issue.add_argument(
        "--scope", action="append", choices=SCOPES, dest="scopes", help="repeatable; default api"
    )
    tlist = tokens_sub.add_parser("list", help="list tokens (never their secrets)")
    tlist.add_argument("user", nargs="?")
    tlist.add_argument("--tenant", default="local")
    revoke = tokens_sub.add_parser("revoke", help="revoke a token by id")
    revoke.add_argument("id")
    for parser in (add, listing, disable, role, issue, tlist, revoke):
        parser.add_argument("--data-dir", type=Path)


def _when(value: datetime | None) -> str:
    return "-" if value is None else value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _member_line(m: Membership) -> str:
    status = "disabled" if m.disabled else "active"
    return f"{m.user}\t{m.tenant}\t{m.role}\t{status}\t{_when(m.created_at)}"


def _token_line(t: TokenInfo) -> str:
    now = datetime.now(UTC)
    status = "revoked" if t.revoked_at else ("active" if t.active(now) else "expired")
    return (
        f"{t.id}\t{t.user}\t{t.tenant}\t{t.name}\t{','.join(t.scopes)}\t{_when(t.created_at)}"
        f"\t{_when(t.expires_at)}\t{_when(t.last_used_at)}\t{status}"
    )


MEMBER_HEADER = "user\ttenant\trole\tstatus\tcreated"
TOKEN_HEADER = "id\tuser\ttenant\tname\tscopes\tcreated\texpires\tlast_used\tstatus"


async def _users(store: PostgresAccountStore, args: argparse.Namespace) -> None:
    if args.action == "add":
        member = await store.add_user(args.tenant, args.user, role=args.role)
        print(MEMBER_HEADER)
        print(_member_line(member))
    elif args.action == "list":
        print(MEMBER_HEADER)
        for m in await store.list_users(args.tenant):
            print(_member_line(m))
    elif args.action == "disable":
        member = await store.disable_user(args.tenant, args.user)
        print(MEMBER_HEADER)
        print(_member_line(member))
    elif args.action == "role":
        member = await store.set_role(args.tenant, args.user, args.role)
        print(MEMBER_HEADER)
        print(_member_line(member))


async def _tokens(store: PostgresAccountStore, args: argparse.Namespace) -> None:
    if args.action == "issue":
        expires = None
        if args.expires_days is not None:
            if not 1 <= args.expires_days <= MAX_EXPIRY_DAYS:
                raise UsageError(f"--expires-days: 1 to {MAX_EXPIRY_DAYS}")
            expires = datetime.now(UTC) + timedelta(days=args.expires_days)
        issued = await store.issue_token(
            args.tenant,
            args.user,
            name=args.name,
            scopes=tuple(args.scopes) if args.scopes else None,
            expires_at=expires,
        )
        print(TOKEN_HEADER)
        print(_token_line(issued.info))
        print("# the token (shown only now):")
        print(issued.secret)
    elif args.action == "list":
        print(TOKEN_HEADER)
        for t in await store.list_tokens(args.tenant, args.user):
            print(_token_line(t))
    elif args.action == "revoke":
        found = await store.lookup_token(args.id)
        if found is None:
            raise TokenNotFound(f"no token {args.id}")
        revoked = await store.revoke_token(found.tenant, found.id)
        print(TOKEN_HEADER)
        print(_token_line(revoked))


class UsageError(Exception):
    pass


async def run(command: str, args: argparse.Namespace, settings: Settings) -> int:
    """Run one ``users``/``tokens`` command; the exit status."""
    if settings.storage != "postgres":
        return _fail("storage_memory", "accounts commands need PostgreSQL (OPENREALTIME_STORAGE)")
    from runtime.services import MIGRATED_PACKAGES

    handler: Command = _users if command == "users" else _tokens
    try:
        database = await open_database(
            database_url=settings.database_url,
            data_dir=settings.data_dir,
            max_size=2,
            application_name="openrealtime-cli",
        )
    except DatabaseError as e:
        return _fail(e.code, str(e))
    try:
        await apply_migrations(database.pool, MIGRATED_PACKAGES)
        await handler(PostgresAccountStore(database.pool), args)
    except AccountError as e:
        return _fail(e.code, str(e))
    except UsageError as e:
        print(f"openrealtime: {e}", file=sys.stderr)
        return 2
    except (DatabaseError, MigrationError) as e:
        return _fail(e.code, str(e))
    finally:
        await database.close()
    return 0


def _fail(code: str, message: str) -> int:
    print(f"openrealtime: {code}: {message}", file=sys.stderr)
    return 1
