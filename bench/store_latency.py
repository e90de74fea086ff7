"""Query latency of the two KB vector stores on the same KBs: chroma and pgvector answer the same
similarity queries (the tables collection and every table's columns collection) for a database's
dev questions, interleaved so that machine load falls on both alike.

The KBs are those ``bench/retrieval_recall.py`` built: ``--chroma-root`` with ``--kb-store chroma``,
``--pgvector-root`` with ``--kb-store pgvector``.

Run: ``python bench/store_latency.py --root ../shared/benchmarks --pgvector-root /tmp/bench-pg``
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from reflect_sql.experiments.datasets import load_dataset  # noqa: E402
from reflect_sql.kb.documents import GLOBAL, collection_for_table  # noqa: E402
from reflect_sql.kb.embedding import embed  # noqa: E402
from reflect_sql.kb.store import open_store  # noqa: E402
from reflect_sql.kb.versions import KBDir  # noqa: E402

DEFAULT_CHROMA_ROOT = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "reflect-sql" / "bench-kb"
DATABASES = (("bird", "superhero"), ("bird", "student_club"), ("spider", "world_1"))


def measure(root: Path, chroma_root: Path, pgvector_root: Path, questions: int, rounds: int) -> dict:
    out = {}
    for dataset, db in DATABASES:
        texts = [q.question for q in load_dataset(dataset, root / dataset) if q.db_id == db][:questions]
        vectors = embed(texts)
        stores = {"chroma": open_store(chroma_root / dataset / db), "pgvector": open_store(pgvector_root / dataset / db)}
        kinds = {name: type(store).__name__ for name, store in stores.items()}
        if kinds != {"chroma": "ChromaStore", "pgvector": "PgVectorStore"}:
            raise SystemExit(f"{dataset}/{db}: the KB roots hold {kinds}; build them with retrieval_recall.py --kb-store")
        names = [GLOBAL] + [collection_for_table(t.name) for t in KBDir(pgvector_root / dataset / db).load().tables]
        times: dict[str, list[float]] = {"chroma": [], "pgvector": []}
        for r in range(rounds):
            order = list(stores.items()) if r % 2 == 0 else list(reversed(stores.items()))
            for vector in vectors:
                for label, store in order:
                    for name in names:
                        started = time.perf_counter()
                        store.similarities(name, vector)
                        times[label].append(time.perf_counter() - started)
        same = sum(list(stores["chroma"].similarities(GLOBAL, v)) == list(stores["pgvector"].similarities(GLOBAL, v))
                   for v in vectors)
        out[f"{dataset}/{db}"] = {
            **{label: {"median_ms": round(1000 * statistics.median(t), 3),
                       "p90_ms": round(1000 * statistics.quantiles(t, n=10)[-1], 3), "queries": len(t)}
               for label, t in times.items()},
            "collections": len(names), "same_table_ranking": round(same / len(vectors), 4)}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, required=True, help="the shared benchmarks (holds bird/ and spider/)")
    parser.add_argument("--chroma-root", type=Path, default=DEFAULT_CHROMA_ROOT)
    parser.add_argument("--pgvector-root", type=Path, required=True)
    parser.add_argument("--questions", type=int, default=100, help="dev questions per database")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    print(json.dumps(measure(args.root, args.chroma_root, args.pgvector_root, args.questions, args.rounds), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
