"""The KB's vector store on PostgreSQL with pgvector (setting ``kb_store: pgvector``): the same
collections, hashes, similarities and example hits as ``store.ChromaStore``, in one table.

``kb_store_url`` names the server (its database must have, or let us create, the ``vector``
extension). Without one, a local server bundled by the PyPI package ``pgserver`` (PostgreSQL with
pgvector) runs from a data directory under the cache: zero setup, and it also runs as root.

Every KB directory keeps its rows under its own key (a hash of its resolved path), so one
database serves many KBs. The scan is exact (no approximate index): a KB holds hundreds of
documents per collection, which an exact cosine scan orders in well under a millisecond.
"""
from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reflect_sql.errors import UserError
from reflect_sql.kb.documents import Document
from reflect_sql.kb.store import SyncReport, manifest_matches, write_manifest

if TYPE_CHECKING:
    from reflect_sql.settings import Settings

TABLE = "reflect_sql_kb_documents"
LOCAL_SCHEME = "pgserver://"  # a local pgserver cluster in the directory that follows

_SCHEMA = f"""
CREATE EXTENSION IF NOT EXISTS vector;
CREATE TABLE IF NOT EXISTS {TABLE} (
    kb text NOT NULL,
    collection text NOT NULL,
    id text NOT NULL,
    document text NOT NULL,
    metadata jsonb NOT NULL,
    hash text NOT NULL,
    embedding vector NOT NULL,
    PRIMARY KEY (kb, collection, id)
);
"""


def url_of(settings: "Settings") -> str:
    """The server ``settings`` name: ``kb_store_url``, else the local pgserver under the cache."""
    if settings.kb_store_url:
        return settings.kb_store_url
    return LOCAL_SCHEME + str((Path(settings.cache_dir).parent / "pgvector").resolve())


_servers: dict[str, str] = {}  # local pgserver directory URL -> the URI of its running server
_servers_lock = threading.Lock()
_threads = threading.local()  # each thread its own connections: a sync's transaction is not shared


def forget_dead_users(folder: Path) -> None:
    """pgserver counts the processes using a local server in a file and stops the server when the
    last one exits; a process killed before its exit hook stays counted, and the server would run
    for ever. Forget the dead before counting on that file."""
    from pgserver.utils import DiskList, process_is_running

    path = folder / ".handle_pids.json"
    if not path.is_file():  # a new data directory must stay empty for initdb
        return
    users = DiskList(path)
    users.put([pid for pid in users.get() if process_is_running(pid)])


def _target(url: str) -> str:
    """The connection URI of ``url``, starting the local pgserver it names when it is one."""
    if not url.startswith(LOCAL_SCHEME):
        return url
    with _servers_lock:
        if url not in _servers:
            try:
                import pgserver
            except ImportError:
                raise UserError("kb_store: pgvector without kb_store_url needs the `pgserver` package "
                                "(pip install pgserver), or set kb_store_url to a PostgreSQL with pgvector") from None
            folder = Path(url[len(LOCAL_SCHEME):])
            folder.mkdir(parents=True, exist_ok=True)
            forget_dead_users(folder)
            # Stopped when the last process using it exits: no server is left behind.
            _servers[url] = pgserver.get_server(folder).get_uri()
        return _servers[url]


def _connect(url: str):
    connections = _threads.__dict__.setdefault("connections", {})
    if url not in connections:
        import psycopg

        try:
            connection = psycopg.connect(_target(url), autocommit=True)
        except psycopg.OperationalError as exc:
            raise UserError(f"cannot reach the pgvector KB store at {url}: {str(exc).strip()}") from None
        try:
            with _servers_lock:  # CREATE ... IF NOT EXISTS still races with itself
                connection.execute(_SCHEMA)
        except psycopg.Error as exc:
            raise UserError(f"the KB store at {url} cannot hold vectors (is pgvector installed?): "
                            f"{str(exc).strip()}") from None
        connections[url] = connection
    return connections[url]


def _vector(values) -> str:
    return "[" + ",".join(repr(float(v)) for v in values) + "]"


class PgVectorStore:
    def __init__(self, kb_path: str | Path, url: str | None):
        if not url:
            raise UserError(f"{kb_path} says its KB is on pgvector but names no server; rebuild it "
                            "(reflect-sql kb build --set kb_store=pgvector)")
        self.path = Path(kb_path)
        self.url = url
        self.key = hashlib.sha256(str(self.path.resolve()).encode()).hexdigest()[:24]

    @property
    def _db(self):
        return _connect(self.url)

    def up_to_date(self, wanted: dict[str, list[Document]]) -> bool:
        # The manifest alone, as chroma's: an unchanged rebuild must not need the server.
        # The key too: a copied directory's rows are still under its original's key.
        return manifest_matches(self.path, wanted, store="pgvector", url=self.url, key=self.key)

    def sync(self, wanted: dict[str, list[Document]]) -> SyncReport:
        report = SyncReport()
        if self.up_to_date(wanted):
            return report
        from reflect_sql.kb.embedding import embed

        db = self._db
        have: dict[tuple[str, str], str] = {
            (c, i): h for c, i, h in db.execute(f"SELECT collection, id, hash FROM {TABLE} WHERE kb = %s", (self.key,))}
        wanted_ids = {(name, d.id) for name, docs in wanted.items() for d in docs}
        dropped = {c for c, _ in have} - set(wanted)
        gone = [(c, i) for c, i in have if c in wanted and (c, i) not in wanted_ids]
        pending = [(name, d) for name, docs in wanted.items() for d in docs if have.get((name, d.id)) != d.hash]
        with db.transaction():
            with db.cursor() as cur:
                if dropped:
                    cur.execute(f"DELETE FROM {TABLE} WHERE kb = %s AND collection = ANY(%s)", (self.key, list(dropped)))
                if gone:
                    cur.executemany(f"DELETE FROM {TABLE} WHERE kb = %s AND collection = %s AND id = %s",
                                    [(self.key, c, i) for c, i in gone])
                if pending:
                    vectors = embed([d.text for _, d in pending])
                    cur.executemany(
                        f"INSERT INTO {TABLE} (kb, collection, id, document, metadata, hash, embedding) "
                        "VALUES (%s, %s, %s, %s, %s, %s, %s::vector) ON CONFLICT (kb, collection, id) DO UPDATE SET "
                        "document = EXCLUDED.document, metadata = EXCLUDED.metadata, hash = EXCLUDED.hash, "
                        "embedding = EXCLUDED.embedding",
                        [(self.key, name, d.id, d.text, json.dumps({**d.metadata, "hash": d.hash}, ensure_ascii=False),
                          d.hash, _vector(vector)) for (name, d), vector in zip(pending, vectors)])
        report.embedded, report.deleted, report.collections_dropped = len(pending), len(gone), len(dropped)
        write_manifest(self.path, wanted, store="pgvector", url=self.url, key=self.key)
        return report

    def preload(self) -> int:
        """Nothing to read ahead: every similarity is one query that the server answers from its index."""
        return 0

    def similarities(self, collection_name: str, query_vector, n: int | None = None) -> dict[str, float]:
        """``{document id: cosine similarity}`` for the ``n`` nearest documents (all by default)."""
        vector = _vector(query_vector)
        rows = self._db.execute(
            f"SELECT id, 1 - (embedding <=> %s::vector) FROM {TABLE} WHERE kb = %s AND collection = %s "
            "ORDER BY embedding <=> %s::vector LIMIT %s", (vector, self.key, collection_name, vector, n)).fetchall()
        return {i: float(sim) for i, sim in rows}

    def example_hits(self, query_vector, n: int) -> list[tuple[str, float, dict]]:
        """(document id, similarity, metadata) of the nearest verified examples."""
        if n <= 0:
            return []
        vector = _vector(query_vector)
        rows = self._db.execute(
            f"SELECT id, 1 - (embedding <=> %s::vector), metadata, document FROM {TABLE} "
            "WHERE kb = %s AND collection = 'examples' ORDER BY embedding <=> %s::vector LIMIT %s",
            (vector, self.key, vector, n)).fetchall()
        return [(i, float(sim), {**(meta or {}), "text": doc}) for i, sim, meta, doc in rows]
