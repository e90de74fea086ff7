"""Least privilege on PostgreSQL: the roles the engine will not query as, and the SQL of one it will.

A READ ONLY transaction stops writes to tables, not a superuser: ``pg_read_file`` and ``lo_import``
read server files inside one. The sqlglot gate denies those calls; a role without the rights is the
wall behind it. So the engine refuses, unless ``pg_allow_superuser`` (``--allow-superuser``) says
otherwise, a role that is or may become a superuser, or that belongs to one of the predefined roles
reaching the server's files and programs. ``read_only_role_sql`` writes the SQL of a role it accepts;
``reflect-sql db grant-readonly`` prints it for an administrator to run.
"""
from __future__ import annotations

import sys
import threading

import psycopg
from psycopg import sql as pg_sql
from psycopg.conninfo import conninfo_to_dict

from reflect_sql.db.base import PrivilegedRole
from reflect_sql.errors import UserError

FILE_ROLES = ("pg_read_server_files", "pg_write_server_files", "pg_execute_server_program")
GRANT_COMMAND = "reflect-sql db grant-readonly --db URL --role NAME"

# Membership, not only inherited rights: a NOINHERIT member of a superuser role can still SET ROLE to it.
_PRIVILEGED_SQL = """
SELECT current_user, coalesce(array_agg(r.rolname ORDER BY r.rolname), '{}')
FROM pg_roles r
WHERE (r.rolsuper OR r.rolname = ANY(%s)) AND pg_has_role(current_user, r.oid, 'MEMBER')"""

_warned: set[str] = set()
_warned_lock = threading.Lock()


def privileged_roles(conn: psycopg.Connection) -> tuple[str, list[str]]:
    """(the session's role, the superuser and file-reaching roles it is or belongs to)."""
    user, roles = conn.execute(_PRIVILEGED_SQL, [list(FILE_ROLES)]).fetchone()
    return user, list(roles)


def _what(user: str, roles: list[str]) -> str:
    if roles == [user]:
        return f"role {user}, a superuser"
    return f"role {user}, a member of {', '.join(r for r in roles if r != user) or user}"


def check_role(conn: psycopg.Connection, shown_url: str, allow: bool) -> None:
    """Refuse a privileged role, or with ``allow`` warn about it once per process and database."""
    user, roles = privileged_roles(conn)
    if not roles:
        return
    what = _what(user, roles)
    if not allow:
        raise PrivilegedRole(
            f"refusing to query {shown_url} as {what}: it reads server files even inside a READ ONLY transaction "
            f"(pg_read_file, lo_import); connect as a read-only role (`{GRANT_COMMAND}` prints the SQL of one: "
            "pg_read_all_data plus default_transaction_read_only), or pass --allow-superuser to take the risk")
    with _warned_lock:
        if shown_url in _warned:
            return
        _warned.add(shown_url)
    print(f"reflect-sql: warning: querying {shown_url} as {what} (--allow-superuser): only the SQL gate keeps it "
          f"from server files; a read-only role is safer (`{GRANT_COMMAND}`)", file=sys.stderr)


def _identifier(name: str) -> str:
    return pg_sql.Identifier(name).as_string(None)


def read_only_role_sql(url: str, role: str) -> str:
    """The SQL that creates ``role``: it logs in, reads and never writes, and the engine accepts it.

    Without a ``schema=`` in ``url`` the role reads every table of the database (``pg_read_all_data``,
    PostgreSQL 14 or later); with one, only that schema's tables, present and future."""
    from reflect_sql.db.postgres import split_schema  # db.postgres imports this module

    role = role.strip()
    if not role:
        raise UserError("--role must name the role to create")
    if role.lower().startswith("pg_"):
        raise UserError(f"role name {role!r} is reserved: PostgreSQL keeps names starting with pg_ for its own roles")
    conninfo, schema = split_schema(url)
    try:
        params = conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError as exc:
        raise UserError(f"--db is not a PostgreSQL URL: {exc}") from None
    database = params.get("dbname")
    if not database:
        raise UserError("--db names no database: give postgresql://host:port/DBNAME")
    for what, value in (("role", role), ("database", database), ("schema", schema or "")):
        if not value.isprintable():  # it would end a comment line of the script, and start a statement
            raise UserError(f"the {what} name {value!r} holds a control character")
    name, db = _identifier(role), _identifier(database)
    lines = [
        f"-- A read-only role for reflect-sql on database {database}. Run as a role with CREATEROLE, e.g.",
        f"--   reflect-sql db grant-readonly --db URL --role {role} | psql ADMIN_URL",
        f"CREATE ROLE {name} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS;",
        "-- Its transactions are READ ONLY unless they say otherwise (reflect-sql's own session says so too).",
        f"ALTER ROLE {name} SET default_transaction_read_only = on;",
        f"GRANT CONNECT ON DATABASE {db} TO {name};",
    ]
    if schema is None:
        lines += [
            "-- SELECT on every table, view and sequence, USAGE on every schema; no write, no server file.",
            f"GRANT pg_read_all_data TO {name};",
        ]
    else:
        space = _identifier(schema)
        lines += [
            f"-- Only schema {schema}: its tables now, and those the role running this creates there later.",
            f"GRANT USAGE ON SCHEMA {space} TO {name};",
            f"GRANT SELECT ON ALL TABLES IN SCHEMA {space} TO {name};",
            f"ALTER DEFAULT PRIVILEGES IN SCHEMA {space} GRANT SELECT ON TABLES TO {name};",
        ]
    lines.append(f"-- Then give it a password (psql: \\password {role}) and connect as it: --db "
                 f"postgresql://{role}@HOST:PORT/{database}" + (f"?schema={schema}" if schema else ""))
    return "\n".join(lines) + "\n"
