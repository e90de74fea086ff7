"""Retrieval on a large schema: every shared dev database merged into one, plus distractor tables.

The schema a team points reflect-sql at can hold thousands of columns; the shared dev databases hold
a few dozen each. This bench builds one SQLite database that holds:

- every table of every shared dev database (BIRD's and Spider's), with its rows, keys and BIRD
  column descriptions. A table whose name another database already took is renamed
  ``<db_id>_<table>``, and the gold SQL is read through that renaming;
- synthetic distractor tables with realistic names, keys and values (warehouses, invoices, patients,
  ...), deterministic for a seed, until the schema holds ``--columns`` columns.

Then it builds the KB of that schema (in a child process, so its time and peak memory are its own)
and asks every shared question against it, at the default settings (so within the default context
budget). It prints:

- table and column recall against what the gold SQL uses, and the share of columns retrieved;
- retrieval latency per question (p50, p95), with the retriever warm (``Retriever.warm``: the
  embedding model loaded, every collection's embeddings read), and the warm-up's seconds;
- the KB build time and the build's peak resident memory.

The merged database and the KB are kept under ``--work-dir`` and rebuilt only when missing or with
``--fresh`` (the build time reported is then the fresh build's).

Run: ``python bench/retrieval_scale.py --json`` (about 10,000 columns by default).
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import resource
import shutil
import sqlite3
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from reflect_sql.db.connect import open_engine  # noqa: E402
from reflect_sql.db.identifiers import quote_identifier  # noqa: E402
from reflect_sql.db.schema import Schema  # noqa: E402
from reflect_sql.errors import UserError  # noqa: E402
from reflect_sql.experiments.datasets import load_dataset  # noqa: E402
from reflect_sql.kb import embedding  # noqa: E402
from reflect_sql.kb.build import build_kb  # noqa: E402
from reflect_sql.kb.retrieve import Retriever  # noqa: E402
from reflect_sql.kb.usage import UsageError, sql_usage  # noqa: E402
from reflect_sql.settings import load_settings  # noqa: E402

DEFAULT_WORK_DIR = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "reflect-sql" / "bench-scale"
SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "benchmarks"
DISTRACTOR_ROWS = 12


def q(name: str) -> str:
    return quote_identifier(name, "sqlite")


@dataclass
class Merged:
    """Where each source database's tables went in the merged schema."""
    renamed: dict[str, dict[str, str]] = field(default_factory=dict)  # db_id -> {old lower: new}
    columns: int = 0
    tables: int = 0
    distractor_tables: int = 0
    distractor_columns: int = 0


def _ddl(schema: Schema, table, new_name: dict[str, str]) -> str:
    parts = [f"{q(c.name)} {c.type}".strip() for c in table.columns]
    if table.primary_key:
        parts.append(f"PRIMARY KEY ({', '.join(q(c) for c in table.primary_key)})")
    for fk in schema.foreign_keys:
        if fk.table.lower() == table.name.lower() and fk.ref_table.lower() in new_name:
            parts.append(f"FOREIGN KEY ({', '.join(q(c) for c in fk.columns)}) REFERENCES "
                         f"{q(new_name[fk.ref_table.lower()])} ({', '.join(q(c) for c in fk.ref_columns)})")
    return f"CREATE TABLE {q(new_name[table.name.lower()])} ({', '.join(parts)})"


def merge_sources(sources: list, conn: sqlite3.Connection, descriptions_out: Path) -> Merged:
    """Copy every source database (one Question per db_id) into ``conn``."""
    merged = Merged()
    taken: set[str] = set()
    for source in sources:
        engine = open_engine(source.db_path)
        try:
            schema = engine.introspect(tables_json=str(source.tables_json) if source.tables_json else None,
                                       db_id=source.db_id)
        finally:
            engine.close()
        new_name: dict[str, str] = {}
        for table in schema.tables:
            name = table.name if table.name.lower() not in taken else f"{source.db_id}_{table.name}"
            taken.add(name.lower())
            new_name[table.name.lower()] = name
        merged.renamed[source.db_id] = new_name
        conn.execute("ATTACH DATABASE ? AS src", (f"file:{source.db_path}?mode=ro",))
        try:
            for table in schema.tables:
                conn.execute(_ddl(schema, table, new_name))
                conn.execute(f"INSERT INTO main.{q(new_name[table.name.lower()])} SELECT * FROM src.{q(table.name)}")
                merged.columns += len(table.columns)
                merged.tables += 1
            conn.commit()
        finally:
            conn.execute("DETACH DATABASE src")
        if source.descriptions_dir:
            by_table = {p.stem.lower(): p for p in Path(source.descriptions_dir).glob("*.csv")}
            for old, new in new_name.items():
                if old in by_table:
                    shutil.copyfile(by_table[old], descriptions_out / f"{new}.csv")
    return merged


# Distractors: tables a large operational database really holds, with columns named as such schemas
# name them. Names overlap the real databases' vocabulary (name, city, year, ...) on purpose: a
# distractor that shares no word with any question would distract nothing.
ENTITIES = """supplier purchase_order invoice invoice_line shipment warehouse inventory_item stock_movement
payroll_run timesheet vehicle maintenance_log sensor_reading support_ticket marketing_campaign web_session
subscription refund loyalty_member course_enrollment lab_result prescription insurance_claim property_listing
lease parking_permit library_loan event_booking venue_rental fleet_route delivery_stop budget_line
expense_report vendor_contract asset_register depreciation_entry tax_filing bank_transfer credit_note
customer_complaint product_review price_list promotion coupon_redemption store_visit footfall_count
job_posting job_application interview_slot training_session certification safety_incident audit_finding
patient_visit appointment ward_bed lab_sample vaccination radiology_scan pharmacy_order clinic_staff
student_grade exam_sitting classroom timetable_slot scholarship alumni_donation research_grant
flight_leg crew_roster baggage_claim hotel_stay room_booking car_rental tour_package travel_agent
energy_meter water_usage waste_pickup recycling_bin street_light traffic_count road_segment bus_stop
match_fixture player_transfer ticket_sale stadium_section broadcast_slot sponsorship_deal club_member
recipe ingredient_batch kitchen_station menu_special table_reservation delivery_order rider_shift
album_release track_stream concert_tour royalty_payment artist_contract playlist_entry podcast_episode
""".split()
VARIANTS = ["", "archive", "staging", "eu", "us", "apac", "2019", "2020", "2021", "legacy", "daily", "monthly"]
FIRST = "Anna Ben Chloe David Emma Felix Grace Hugo Iris Jack Kate Liam Mia Noah Olga Paul Rosa Sam Tara Omar".split()
LAST = "Smith Jones Brown Garcia Muller Rossi Silva Kim Nguyen Novak Dubois Larsen Costa Tanaka Patel".split()
CITIES = "Lyon Porto Austin Leeds Osaka Quito Accra Hanoi Perth Graz Cork Turin Malmo Recife Tampa".split()
COUNTRIES = "France Portugal Canada Japan Ghana Vietnam Austria Ireland Italy Sweden Brazil Chile Kenya".split()
STATUSES = "open closed pending shipped cancelled approved rejected active inactive draft".split()
CATEGORIES = "standard premium basic internal external urgent routine seasonal bulk retail".split()
WORDS = "quarterly review of the regional account with notes on delays pricing quality and follow up".split()


def _attributes(rng: random.Random):
    """(name, type, value maker) pool; value makers take the row number."""
    def person(_):
        return f"{rng.choice(FIRST)} {rng.choice(LAST)}"

    def words(n):
        return lambda _: " ".join(rng.choice(WORDS) for _ in range(n)).capitalize()

    def date(_):
        return f"20{rng.randint(15, 24):02d}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"

    return [
        ("name", "TEXT", person), ("title", "TEXT", words(3)), ("status", "TEXT", lambda _: rng.choice(STATUSES)),
        ("created_at", "DATE", date), ("updated_at", "DATE", date), ("start_date", "DATE", date),
        ("end_date", "DATE", date), ("amount", "REAL", lambda _: round(rng.uniform(1, 9999), 2)),
        ("quantity", "INTEGER", lambda _: rng.randint(1, 500)),
        ("unit_price", "REAL", lambda _: round(rng.uniform(0.5, 500), 2)),
        ("currency", "TEXT", lambda _: rng.choice(["EUR", "USD", "JPY", "GBP"])),
        ("country", "TEXT", lambda _: rng.choice(COUNTRIES)), ("city", "TEXT", lambda _: rng.choice(CITIES)),
        ("email", "TEXT", lambda i: f"user{i}@example.org"), ("phone", "TEXT", lambda i: f"+1-555-{1000 + i}"),
        ("notes", "TEXT", words(12)), ("description", "TEXT", words(8)),
        ("category", "TEXT", lambda _: rng.choice(CATEGORIES)), ("code", "TEXT", lambda i: f"C{i:05d}"),
        ("rating", "INTEGER", lambda _: rng.randint(1, 5)), ("age", "INTEGER", lambda _: rng.randint(18, 90)),
        ("year", "INTEGER", lambda _: rng.randint(1990, 2024)), ("score", "REAL", lambda _: round(rng.random() * 100, 1)),
        ("priority", "INTEGER", lambda _: rng.randint(1, 4)), ("region", "TEXT", lambda _: rng.choice(COUNTRIES)),
        ("manager_name", "TEXT", person), ("department", "TEXT", lambda _: rng.choice(CATEGORIES)),
        ("weight_kg", "REAL", lambda _: round(rng.uniform(0.1, 80), 1)),
        ("height_cm", "REAL", lambda _: round(rng.uniform(40, 210), 1)),
        ("capacity", "INTEGER", lambda _: rng.randint(2, 5000)), ("address", "TEXT", words(4)),
        ("postal_code", "TEXT", lambda _: f"{rng.randint(10000, 99999)}"),
        ("is_active", "INTEGER", lambda _: rng.randint(0, 1)), ("channel", "TEXT", lambda _: rng.choice(CATEGORIES)),
        ("duration_minutes", "INTEGER", lambda _: rng.randint(5, 600)),
        ("total_cost", "REAL", lambda _: round(rng.uniform(10, 99999), 2)),
        ("owner_name", "TEXT", person), ("language", "TEXT", lambda _: rng.choice(["en", "fr", "ja", "pt", "vi"])),
    ]


def add_distractors(conn: sqlite3.Connection, merged: Merged, target_columns: int, seed: int) -> None:
    rng = random.Random(seed)
    pool = _attributes(rng)
    taken = {r[0].lower() for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    made: list[str] = []
    names = [f"{e}_{v}" if v else e for v in VARIANTS for e in ENTITIES]
    for name in names:
        if merged.columns >= target_columns:
            break
        if name.lower() in taken:
            continue
        taken.add(name.lower())
        key = f"{name}_id"
        attributes = rng.sample(pool, min(len(pool), rng.randint(6, 14)))
        refs = rng.sample(made, min(len(made), rng.randint(0, 2)))
        columns = [f"{q(key)} INTEGER PRIMARY KEY"] + [f"{q(a)} {t}" for a, t, _ in attributes]
        columns += [f"{q(r + '_id')} INTEGER REFERENCES {q(r)} ({q(r + '_id')})" for r in refs]
        conn.execute(f"CREATE TABLE {q(name)} ({', '.join(columns)})")
        rows = [[i + 1] + [make(i) for _, _, make in attributes] + [rng.randint(1, DISTRACTOR_ROWS) for _ in refs]
                for i in range(DISTRACTOR_ROWS)]
        conn.executemany(f"INSERT INTO {q(name)} VALUES ({', '.join('?' * len(rows[0]))})", rows)
        made.append(name)
        width = 1 + len(attributes) + len(refs)
        merged.columns += width
        merged.tables += 1
        merged.distractor_tables += 1
        merged.distractor_columns += width
    conn.commit()
    if merged.columns < target_columns:
        raise UserError(f"the distractor vocabulary ran out at {merged.columns} columns (asked {target_columns})")


def _build(db: str, kb_dir: str, descriptions: str | None, config: str | None, out) -> None:
    started = time.perf_counter()
    build_kb(db, kb_dir, load_settings(config), descriptions=descriptions)
    out.put(time.perf_counter() - started)


def build_in_child(db: Path, kb_dir: Path, descriptions: Path | None, config: str | None) -> tuple[float, float]:
    """(seconds, peak RSS in MiB) of the KB build, run in a fresh process so both are its own."""
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    child = ctx.Process(target=_build, args=(str(db), str(kb_dir), str(descriptions) if descriptions else None,
                                              config, out))
    child.start()
    child.join()
    if child.exitcode != 0:
        raise UserError(f"the KB build failed (exit {child.exitcode})")
    return out.get(), resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(share * (len(ordered) - 1))))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--columns", type=int, default=10_000, help="columns of the merged schema (default 10000)")
    parser.add_argument("--seed", type=int, default=0, help="distractor generator seed")
    parser.add_argument("--bird-root", type=Path, default=SHARED / "bird")
    parser.add_argument("--spider-root", type=Path, default=SHARED / "spider")
    parser.add_argument("--work-dir", type=Path, default=DEFAULT_WORK_DIR,
                        help=f"merged database and KB (default {DEFAULT_WORK_DIR})")
    parser.add_argument("--fresh", action="store_true", help="rebuild the merged database and the KB")
    parser.add_argument("--config", help="settings YAML")
    parser.add_argument("--limit", type=int, help="ask only the first N questions of each dataset")
    parser.add_argument("--json", action="store_true", help="print JSON only")
    args = parser.parse_args(argv)
    try:
        settings = load_settings(args.config)
        datasets = {"bird": load_dataset("bird", args.bird_root), "spider": load_dataset("spider", args.spider_root)}
        if args.limit:
            datasets = {name: qs[:args.limit] for name, qs in datasets.items()}
        work = args.work_dir / f"{args.columns}-{args.seed}"
        db_path, kb_dir, descriptions = work / "merged.sqlite", work / "kb", work / "descriptions"
        if args.fresh and work.exists():
            shutil.rmtree(work)
        sources = {}
        for questions in (load_dataset("bird", args.bird_root), load_dataset("spider", args.spider_root)):
            for question in questions:
                sources.setdefault(question.db_id, question)
        merged_json = work / "merged.json"
        if not merged_json.is_file():
            work.mkdir(parents=True, exist_ok=True)
            descriptions.mkdir(exist_ok=True)
            db_path.unlink(missing_ok=True)
            with sqlite3.connect(db_path) as conn:
                merged = merge_sources(list(sources.values()), conn, descriptions)
                add_distractors(conn, merged, args.columns, args.seed)
            conn.close()
            merged_json.write_text(json.dumps(merged.__dict__), encoding="utf-8")
        merged = Merged(**json.loads(merged_json.read_text(encoding="utf-8")))
        fresh_build = not (kb_dir / "kb.json").exists()
        build_seconds, build_peak_mib = build_in_child(db_path, kb_dir, descriptions, args.config)

        retriever = Retriever(kb_dir, settings)
        # The goal is latency with the model loaded: load it, the value index and every collection's
        # embeddings, then answer one question for the lazy word indexes, before timing.
        warm_started = time.perf_counter()
        retriever.warm()
        warm_seconds = time.perf_counter() - warm_started
        first = datasets["bird"][0]
        retriever.retrieve(first.question, evidence=first.evidence)
        mapping_of: dict[str, dict] = {}
        per_dataset, latencies, cpu, skipped = {}, [], [], 0
        for name, questions in datasets.items():
            rows = []
            for question in questions:
                if question.db_id not in mapping_of:
                    engine = open_engine(question.db_path)
                    try:
                        mapping_of[question.db_id] = engine.introspect().sqlglot_mapping()
                    finally:
                        engine.close()
                try:
                    gold_tables, gold_columns = sql_usage(question.gold_sql, mapping_of[question.db_id])
                except UsageError:
                    skipped += 1
                    continue
                renamed = merged.renamed[question.db_id]
                gt = {renamed[t.lower()].lower() for t in gold_tables}
                gc = {f"{renamed[c.split('.', 1)[0].lower()]}.{c.split('.', 1)[1]}".lower() for c in gold_columns}
                started, cpu_started = time.perf_counter(), time.process_time()
                ctx = retriever.retrieve(question.question, evidence=question.evidence if name == "bird" else "")
                latencies.append((time.perf_counter() - started) * 1000)
                cpu.append((time.process_time() - cpu_started) * 1000)
                got_tables = {t.lower() for t in ctx.tables}
                got_columns = {c.lower() for c in ctx.columns}
                rows.append((len(gt & got_tables) / len(gt) if gt else 1.0,
                             len(gc & got_columns) / len(gc) if gc else 1.0,
                             len(got_columns) / merged.columns, ctx.pruned))
            per_dataset[name] = {
                "questions": len(rows),
                "table_recall": round(statistics.fmean(r[0] for r in rows), 4),
                "column_recall": round(statistics.fmean(r[1] for r in rows), 4),
                "column_fraction": round(statistics.fmean(r[2] for r in rows), 5),
                "pruned": {mode: round(sum(r[3] == mode for r in rows) / len(rows), 4)
                           for mode in sorted({r[3] for r in rows})},
            }
        everything = sum(d["questions"] for d in per_dataset.values())
        result = {
            "columns": merged.columns, "tables": merged.tables,
            "distractor_tables": merged.distractor_tables, "distractor_columns": merged.distractor_columns,
            "questions": everything, "skipped_unparsable_gold": skipped,
            "table_recall": round(sum(d["table_recall"] * d["questions"] for d in per_dataset.values()) / everything, 4),
            "column_recall": round(sum(d["column_recall"] * d["questions"] for d in per_dataset.values()) / everything, 4),
            "per_dataset": per_dataset,
            "context_budget_tokens": settings.context_budget_tokens,
            "k_tables": settings.k_tables, "m_columns": settings.m_columns,
            "retrieval_ms": {"p50": round(_percentile(latencies, 0.5), 1), "p95": round(_percentile(latencies, 0.95), 1),
                             "mean": round(statistics.fmean(latencies), 1),
                             # CPU time of this process (the embedder's threads included): less
                             # sensitive than wall time to other work on the machine.
                             "cpu_p50": round(_percentile(cpu, 0.5), 1),
                             # Wall times mean little without the machine's load beside them.
                             "load_average": round(os.getloadavg()[0], 2)},
            "warm_seconds": round(warm_seconds, 2),
            # Whether the warm-up froze the question model (kb.embedding.freeze_query_embedder):
            # the latency differs by about 2 ms a question.
            "question_model_frozen": embedding.frozen_in_use(),
            "build_seconds": round(build_seconds, 1), "build_fresh": fresh_build,
            "build_peak_rss_mib": round(build_peak_mib, 1),
        }
    except UserError as exc:
        print(f"retrieval_scale: error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    print(f"{result['columns']} columns in {result['tables']} tables ({result['distractor_tables']} distractors); "
          f"{everything} questions")
    print(f"  table recall {result['table_recall']:.3f} (target >= 0.95)  column recall "
          f"{result['column_recall']:.3f} (target >= 0.93)")
    for name, d in per_dataset.items():
        print(f"  {name:7s} n={d['questions']:4d} tables {d['table_recall']:.3f} columns {d['column_recall']:.3f} "
              f"fraction {d['column_fraction']:.4f}")
    ms = result["retrieval_ms"]
    print(f"  retrieval p50 {ms['p50']} ms, p95 {ms['p95']} ms (target p50 <= 20 ms); CPU p50 {ms['cpu_p50']} ms; "
          f"load average {ms['load_average']}")
    print(f"  retriever warm-up (embedder, value index, every collection's embeddings) {result['warm_seconds']} s")
    print(f"  KB build {result['build_seconds']} s ({'fresh' if fresh_build else 'up to date'}), "
          f"peak RSS {result['build_peak_rss_mib']} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
