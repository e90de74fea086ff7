"""KB build speed: a full build of every shared dev database, then a rebuild with nothing changed.

The full build starts from empty KB directories in one fresh process, so it pays for everything:
importing sentence-transformers and chromadb, loading the embedder, introspection, value indexes
and embedding every document. The rebuild runs the same build again in a new process: it must find
nothing changed, embed nothing, and not even load the embedder. Targets: <= 30 s and <= 1 s (wall
clock inside the process, imports included; the process's CPU time is printed too, since other
load on the machine stretches wall time).

Run: ``python bench/kb_build.py [--bird ../shared/benchmarks/bird] [--spider ../shared/benchmarks/spider] [--json]``
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FULL_TARGET_S = 30.0
REBUILD_TARGET_S = 1.0
HERE = Path(__file__).resolve()


def databases(bird: Path | None, spider: Path | None) -> list[dict]:
    """Every database with a SQLite file under the two roots, with its description folder and tables.json."""
    out = []
    if bird:
        for db in sorted((bird / "dev_databases").glob("*/*.sqlite")):
            descriptions = db.parent / "database_description"
            out.append({"db": str(db), "db_id": db.stem, "tables_json": str(bird / "dev_tables.json"),
                        "descriptions": str(descriptions) if descriptions.is_dir() else None})
    if spider:
        for db in sorted((spider / "database").glob("*/*.sqlite")):
            out.append({"db": str(db), "db_id": db.stem, "tables_json": str(spider / "tables.json"),
                        "descriptions": None})
    return out


def build_all(dbs: list[dict], kb_root: Path) -> dict:
    """Runs inside the timed child process."""
    started, cpu = time.perf_counter(), time.process_time()
    from reflect_sql.kb.build import build_kb
    from reflect_sql.settings import Settings

    settings = Settings()
    embedded = 0
    new_versions = 0
    for item in dbs:
        report = build_kb(item["db"], kb_root / item["db_id"], settings, descriptions=item["descriptions"],
                          tables_json=item["tables_json"], db_id=item["db_id"])
        embedded += report.embedded
        new_versions += report.new_version
    return {"seconds": time.perf_counter() - started, "cpu_seconds": time.process_time() - cpu, "embedded": embedded, "new_versions": new_versions,
            "embedder_loaded": "sentence_transformers" in sys.modules, "chromadb_loaded": "chromadb" in sys.modules}


def _child(dbs: list[dict], kb_root: Path) -> dict:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, str(HERE), "--child", str(kb_root)], input=json.dumps(dbs),
                          capture_output=True, text=True, env=env)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"kb_build: the build failed:\n{proc.stderr[-3000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["process_seconds"] = wall
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    root = HERE.parents[2] / "shared" / "benchmarks"
    parser.add_argument("--bird", type=Path, default=root / "bird")
    parser.add_argument("--spider", type=Path, default=root / "spider")
    parser.add_argument("--kb-root", type=Path, help="where to build (default: a fresh temporary directory)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(build_all(json.loads(sys.stdin.read()), args.child)))
        return 0

    dbs = databases(args.bird if args.bird.is_dir() else None, args.spider if args.spider.is_dir() else None)
    if not dbs:
        print(f"kb_build: no databases under {args.bird} or {args.spider}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="kb-build-") as tmp:
        kb_root = args.kb_root or Path(tmp)
        full = _child(dbs, kb_root)
        again = _child(dbs, kb_root)
    result = {
        "databases": len(dbs),
        "full_build_seconds": round(full["seconds"], 2),
        "full_build_process_seconds": round(full["process_seconds"], 2),
        "full_build_cpu_seconds": round(full["cpu_seconds"], 2),
        "full_build_embedded": full["embedded"],
        "full_vs_target": round(full["seconds"] / FULL_TARGET_S, 3),
        "rebuild_seconds": round(again["seconds"], 3),
        "rebuild_process_seconds": round(again["process_seconds"], 2),
        "rebuild_cpu_seconds": round(again["cpu_seconds"], 3),
        "rebuild_embedded": again["embedded"],
        "rebuild_new_versions": again["new_versions"],
        "rebuild_loaded_embedder": again["embedder_loaded"],
        "rebuild_vs_target": round(again["seconds"] / REBUILD_TARGET_S, 3),
        "cpus": os.cpu_count(),
        "load_average_1min": round(os.getloadavg()[0], 2),
    }
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    print(f"{result['databases']} databases, {os.cpu_count()} CPUs (load average {result['load_average_1min']})")
    print(f"  full build: {result['full_build_seconds']:.2f} s ({result['full_vs_target']:.2f} x the {FULL_TARGET_S:g} s "
          f"target), {result['full_build_embedded']} documents embedded; CPU {result['full_build_cpu_seconds']:.2f} s, "
          f"process {result['full_build_process_seconds']:.2f} s")
    print(f"  rebuild, nothing changed: {result['rebuild_seconds']:.3f} s ({result['rebuild_vs_target']:.2f} x the "
          f"{REBUILD_TARGET_S:g} s target), {result['rebuild_embedded']} embedded, embedder loaded: "
          f"{result['rebuild_loaded_embedder']}; CPU {result['rebuild_cpu_seconds']:.3f} s, process "
          f"{result['rebuild_process_seconds']:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
