"""The vector side of a KB directory: one collection of tables, one per table of its columns, one
of verified examples, all in cosine space and embedded by ``embedding.MiniLMEmbedding``.

Two stores hold them behind one interface (``up_to_date``, ``sync``, ``similarities``,
``example_hits``): chromadb in the directory (``ChromaStore``, here) or PostgreSQL with pgvector
(``pgvector_store.PgVectorStore``). ``open_store`` picks one: a build follows the setting
``kb_store``; every later open follows the store the directory's manifest names, since that is
where its documents are.

Each document's metadata carries the hash of its text; ``sync`` embeds only documents whose hash
changed and deletes the ones that vanished. A manifest of the synced hashes lets an unchanged
rebuild return without importing chromadb or the embedder at all.
"""
from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from reflect_sql.kb.documents import EXAMPLES, Document

if TYPE_CHECKING:
    from reflect_sql.settings import Settings

MANIFEST = "index.json"
CHROMA_DIR = "chroma"


@dataclass
class SyncReport:
    embedded: int = 0
    deleted: int = 0
    collections_dropped: int = 0

    @property
    def changed(self) -> bool:
        return bool(self.embedded or self.deleted or self.collections_dropped)


_clients: dict[str, object] = {}
# Two threads that open the same directory at once both built a client, and chroma's shared
# system, half started by one, failed in the other ("'RustBindingsAPI' object has no attribute
# 'bindings'", seen once in CI with threads asking while enrichment wrote).
_clients_lock = threading.Lock()


def client(kb_path: Path):
    """One PersistentClient per directory per process (chroma refuses differing settings twice)."""
    key = str((kb_path / CHROMA_DIR).resolve())
    with _clients_lock:
        if key not in _clients:
            # chromadb and the embedder (kb.embedding) load where used: an unchanged rebuild and a
            # pgvector KB never need them.
            import chromadb
            from chromadb.config import Settings as ChromaSettings

            _clients[key] = chromadb.PersistentClient(path=key, settings=ChromaSettings(anonymized_telemetry=False))
        return _clients[key]


def _collection_names(chroma) -> list[str]:
    # chroma returns names or Collection objects depending on its version.
    return [c if isinstance(c, str) else c.name for c in chroma.list_collections()]


def _collection(chroma, name: str):
    from reflect_sql.kb.embedding import MiniLMEmbedding

    return chroma.get_or_create_collection(
        name, embedding_function=MiniLMEmbedding(), configuration={"hnsw": {"space": "cosine"}})


def read_manifest(kb_path: Path) -> dict[str, Any]:
    path = kb_path / MANIFEST
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError:
        return {}


def write_manifest(kb_path: Path, wanted: dict[str, list[Document]], **store: Any) -> None:
    manifest = {"embedder": "reflect-sql-minilm", **store,
                "collections": {name: {d.id: d.hash for d in docs} for name, docs in wanted.items()}}
    (kb_path / MANIFEST).write_text(json.dumps(manifest, indent=1, ensure_ascii=False), encoding="utf-8")


def manifest_matches(kb_path: Path, wanted: dict[str, list[Document]], **store: Any) -> bool:
    """The manifest records exactly ``wanted``'s hashes, synced into the store ``store`` describes."""
    manifest = read_manifest(kb_path)
    hashes = {name: {d.id: d.hash for d in docs} for name, docs in wanted.items()}
    recorded = {key: manifest.get(key) for key in store}
    # A manifest from before the pgvector store names none: its documents are in chroma.
    if "store" in recorded and recorded["store"] is None and store["store"] == "chroma":
        recorded["store"] = "chroma"
    return manifest.get("collections") == hashes and recorded == store


def open_store(kb_path: str | Path, settings: "Settings | None" = None):
    """The store of a KB directory: with ``settings`` (a build) the one ``settings.kb_store`` names,
    else the one the directory's manifest names (chroma when it names none)."""
    path = Path(kb_path)
    manifest = read_manifest(path)
    kind = settings.kb_store if settings is not None else manifest.get("store", "chroma")
    if kind == "pgvector":
        from reflect_sql.kb.pgvector_store import PgVectorStore, url_of  # pgserver and psycopg: pgvector KBs only

        return PgVectorStore(path, url_of(settings) if settings is not None else manifest.get("url"))
    return ChromaStore(path)


class ChromaStore:
    def __init__(self, kb_path: str | Path):
        self.path = Path(kb_path)
        self._loaded: dict[str, tuple[list[str], np.ndarray]] = {}  # collection -> (ids, unit embeddings)

    def up_to_date(self, wanted: dict[str, list[Document]]) -> bool:
        return manifest_matches(self.path, wanted, store="chroma") and (self.path / CHROMA_DIR).is_dir()

    def sync(self, wanted: dict[str, list[Document]]) -> SyncReport:
        report = SyncReport()
        if self.up_to_date(wanted):
            return report
        self._loaded.clear()  # the embeddings change below
        from reflect_sql.kb.embedding import embed

        chroma = client(self.path)
        existing_names = set(_collection_names(chroma))
        pending: list[tuple[object, Document]] = []
        for name, docs in wanted.items():
            collection = _collection(chroma, name)
            stored = collection.get(include=["metadatas"]) if name in existing_names else {"ids": [], "metadatas": []}
            have = {i: (m or {}).get("hash") for i, m in zip(stored["ids"], stored["metadatas"])}
            ids = {d.id for d in docs}
            gone = [i for i in have if i not in ids]
            if gone:
                collection.delete(ids=gone)
                report.deleted += len(gone)
            pending += [(collection, d) for d in docs if have.get(d.id) != d.hash]
        for name in existing_names - set(wanted):
            chroma.delete_collection(name)
            report.collections_dropped += 1
        if pending:
            # One embedding call for everything that changed: batches fill up across collections.
            vectors = embed([d.text for _, d in pending])
            by_collection: dict[int, tuple[object, list[int]]] = {}
            for i, (collection, _) in enumerate(pending):
                by_collection.setdefault(id(collection), (collection, []))[1].append(i)
            for collection, rows in by_collection.values():
                collection.upsert(
                    ids=[pending[i][1].id for i in rows],
                    documents=[pending[i][1].text for i in rows],
                    embeddings=[vectors[i].tolist() for i in rows],
                    metadatas=[{**pending[i][1].metadata, "hash": pending[i][1].hash} for i in rows],
                )
            report.embedded = len(pending)
        write_manifest(self.path, wanted, store="chroma")
        return report

    def similarities(self, collection_name: str, query_vector, n: int | None = None) -> dict[str, float]:
        """``{document id: cosine similarity}`` for the ``n`` nearest documents (all by default)."""
        loaded = self._loaded.get(collection_name)
        if loaded is None:
            loaded = self._loaded[collection_name] = self._load(collection_name)
        ids, matrix = loaded
        if not ids:
            return {}
        query = np.asarray(query_vector, dtype=np.float32)
        sims = matrix @ (query / (np.linalg.norm(query) or 1.0))
        order = np.argsort(-sims, kind="stable")[: min(n or len(ids), len(ids))]
        return {ids[i]: float(sims[i]) for i in order}

    def preload(self) -> int:
        """Read every collection's embeddings now; returns how many collections were read.

        Lazily, the first question to touch a table pays its read from chroma (about 4 ms each,
        most of a question's retrieval time on a schema of thousands of tables). A retriever that
        answers many questions can pay them all once at open instead (bench/retrieval_scale.py
        does). What is read is a snapshot: a sync through another store object (a rebuild,
        enrichment) is seen by a new store, as the chat's reopened retriever is."""
        read = 0
        for name in _collection_names(client(self.path)):
            # Verified examples are asked of chroma at each question (example_hits), never read whole.
            if name not in self._loaded and name != EXAMPLES:
                self._loaded[name] = self._load(name)
                read += 1
        return read

    def _load(self, collection_name: str) -> tuple[list[str], np.ndarray]:
        """A collection's ids and unit-length embeddings, read from chroma once.

        Retrieval asks for the similarity of every document of a collection (every table, every
        column of a table): exactly what an exhaustive product computes, while chroma's HNSW
        query for all documents, and its count, cost milliseconds each, per table per question
        on a large schema. A store reads one synced KB; ``sync`` drops what was read."""
        chroma = client(self.path)
        try:
            collection = chroma.get_collection(collection_name, embedding_function=_ef())
        except Exception:  # chroma raises NotFoundError or ValueError depending on version
            return [], np.zeros((0, 0), dtype=np.float32)
        got = collection.get(include=["embeddings"])
        if not got["ids"]:
            return [], np.zeros((0, 0), dtype=np.float32)
        matrix = np.asarray(got["embeddings"], dtype=np.float32)
        matrix /= np.maximum(np.linalg.norm(matrix, axis=1, keepdims=True), 1e-12)
        return list(got["ids"]), matrix

    def example_hits(self, query_vector, n: int) -> list[tuple[str, float, dict]]:
        """(document id, similarity, metadata) of the nearest verified examples."""
        chroma = client(self.path)
        try:
            collection = chroma.get_collection(EXAMPLES, embedding_function=_ef())
        except Exception:
            return []
        count = collection.count()
        if not count or n <= 0:
            return []
        result = collection.query(query_embeddings=[list(map(float, query_vector))],
                                  n_results=min(n, count), include=["distances", "metadatas", "documents"])
        return [(i, 1.0 - d, {**(m or {}), "text": doc})
                for i, d, m, doc in zip(result["ids"][0], result["distances"][0], result["metadatas"][0],
                                        result["documents"][0])]


def _ef():
    from reflect_sql.kb.embedding import MiniLMEmbedding

    return MiniLMEmbedding()
