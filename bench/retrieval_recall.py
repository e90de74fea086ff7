"""Recall of two-step retrieval against the tables and columns each gold query uses.

For every question: the gold tables/columns come from the gold SQL, qualified by sqlglot against
the database's schema (``SELECT *`` counts as needing the table only); the retrieved ones from
``Retriever.retrieve`` with the given (or default) k and m. BIRD questions are retrieved with their
evidence appended, as the pipeline does.

- table_recall / column_recall: mean over questions of |gold ∩ retrieved| / |gold| (questions whose
  gold uses no column count as fully recalled for columns);
- table_all / column_all: share of questions with every gold table / column retrieved;
- column_fraction: mean over questions of |retrieved columns| / |all columns of the database|;
- store_ms_per_question / store_ms_per_query: time spent in the vector store's queries (chroma or
  pgvector, ``--kb-store``), per question and per similarity or example query.

KBs are built (incrementally) under ``--kb-root``, one directory per database, from the database,
its description CSVs (BIRD) and the tables.json; no question or gold SQL goes into them.

``--dataset restaurant`` measures the Aria restaurant's bilingual question set (no ``--root``: the
demo database is generated under ``--kb-root``, its KB built with the column descriptions and the
glossary), with figures per language (``per_language``: en, vi). Its questions are retrieved
without their evidence, as the chat's manager asks them, unless ``--with-evidence``. With
``--render``, a question not in English is also said in English by the settings' LM, as the pipeline
does (``programs/language.py``), and both texts are searched; ``seconds_rendering`` is that LM time.

Run: ``python bench/retrieval_recall.py --dataset bird --root ../shared/benchmarks/bird --json``
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Callable

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from reflect_sql.errors import UserError  # noqa: E402
from reflect_sql.experiments.datasets import load_dataset, parse_db_ids  # noqa: E402
from reflect_sql.kb.build import build_kb  # noqa: E402
from reflect_sql.kb.retrieve import Retriever  # noqa: E402
from reflect_sql.kb.usage import UsageError, sql_usage  # noqa: E402
from reflect_sql.settings import Settings, load_settings  # noqa: E402

DEFAULT_KB_ROOT = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "reflect-sql" / "bench-kb"


def restaurant_questions(kb_root: Path, twins: bool = False) -> tuple[list, dict[str, str]]:
    """The restaurant set on a demo database generated under ``kb_root``, and each question's language;
    ``twins``: only the Vietnamese questions and their English twins."""
    from reflect_sql.experiments.smartrestaurant.bird_layout import write_bird_layout

    root, _ = write_bird_layout(kb_root / ("restaurant-twins-dataset" if twins else "restaurant-dataset"), twins=twins)
    entries = json.loads((root / "dev.json").read_text(encoding="utf-8"))
    return load_dataset("bird", root), {str(e["question_id"]): e["lang"] for e in entries}


def renderer(settings: Settings) -> tuple[Callable[[str, Retriever], tuple[str, ...]], list[float]]:
    """The pipeline's question rendering on the settings' generator LM, and a clock of its seconds."""
    import dspy

    from reflect_sql.lm.adapters import make_adapter
    from reflect_sql.lm.factory import configure_lms
    from reflect_sql.programs.handles import Handles
    from reflect_sql.programs.language import QuestionRenderer
    from reflect_sql.programs.trace import Trace

    generator, _ = configure_lms(settings)
    clock = [0.0]

    def render(question: str, retriever: Retriever) -> tuple[str, ...]:
        started = time.perf_counter()
        with dspy.context(adapter=make_adapter(settings)):
            renderings = QuestionRenderer(settings, Handles(None, retriever, generator)).renderings(question, Trace())
        clock[0] += time.perf_counter() - started
        return renderings

    return render, clock


def build_kbs(dataset: str, questions, kb_root: Path, settings: Settings) -> dict[str, Path]:
    dirs = {}
    for q in questions:
        if q.db_id in dirs:
            continue
        kb_dir = kb_root / dataset / q.db_id
        build_kb(str(q.db_path), kb_dir, settings, descriptions=q.descriptions_dir, tables_json=q.tables_json,
                 glossary=q.glossary, db_id=q.db_id)
        dirs[q.db_id] = kb_dir
    return dirs


def _ratio(hit: int, total: int) -> float:
    return 1.0 if total == 0 else hit / total


class _TimedStore:
    """The retriever's store with the time of each query counted."""

    def __init__(self, store, clock: list[float]):
        self.store, self.clock = store, clock

    def __getattr__(self, name):
        method = getattr(self.store, name)
        if name not in ("similarities", "example_hits"):
            return method

        def timed(*args, **kwargs):
            started = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                self.clock[0] += time.perf_counter() - started
                self.clock[1] += 1
        return timed


def evaluate(dataset: str, questions, kb_dirs: dict[str, Path], settings: Settings, k: int | None, m: int | None,
             retrievers: dict[str, Retriever] | None = None, misses: list | None = None, with_evidence: bool = True,
             language_of: dict[str, str] | None = None,
             render: Callable[[str, Retriever], tuple[str, ...]] | None = None) -> dict:
    retrievers = retrievers if retrievers is not None else {}
    rows = defaultdict(list)
    by_language = defaultdict(list)
    skipped = 0
    clock = [0.0, 0]  # seconds in store queries, queries
    for q in questions:
        retriever = retrievers.get(q.db_id)
        if retriever is None:
            retriever = retrievers[q.db_id] = Retriever(kb_dirs[q.db_id], settings)
            retriever.store = _TimedStore(retriever.store, clock)
        kb = retriever.kb
        try:
            gold_tables, gold_columns = sql_usage(q.gold_sql, kb.sqlglot_mapping(), kb.dialect)
        except UsageError:
            skipped += 1
            continue
        evidence = q.evidence if with_evidence and dataset != "spider" else ""
        renderings = render(q.question, retriever) if render is not None else ()
        ctx = retriever.retrieve(q.question, k=k, m=m, evidence=evidence, renderings=renderings)
        got_tables = {t.lower() for t in ctx.tables}
        got_columns = {c.lower() for c in ctx.columns}
        gt = {t.lower() for t in gold_tables}
        gc = {c.lower() for c in gold_columns}
        total_columns = sum(len(t.columns) for t in kb.tables)
        row = (
            _ratio(len(gt & got_tables), len(gt)), gt <= got_tables,
            _ratio(len(gc & got_columns), len(gc)), gc <= got_columns,
            len(got_columns) / total_columns, ctx.pruned,
        )
        rows[q.db_id].append(row)
        if language_of:
            by_language[language_of[q.key]].append(row)
        if misses is not None and not (gt <= got_tables and gc <= got_columns):
            misses.append({"db_id": q.db_id, "question_id": q.key, "question": q.question, "renderings": list(renderings), "evidence": q.evidence,
                           "missing_tables": sorted(gt - got_tables), "missing_columns": sorted(gc - got_columns),
                           "retrieved": sorted(got_columns)})

    def summarise(items):
        n = len(items)
        return {
            "table_recall": round(sum(r[0] for r in items) / n, 4),
            "column_recall": round(sum(r[2] for r in items) / n, 4),
            "column_fraction": round(sum(r[4] for r in items) / n, 4),
            "table_all": round(sum(r[1] for r in items) / n, 4),
            "column_all": round(sum(r[3] for r in items) / n, 4),
            # Share of questions by what retrieval left out: "none" (the whole database fitted the
            # budget), "tables", or "tables and columns".
            "pruned": {mode: round(sum(r[5] == mode for r in items) / n, 4) for mode in sorted({r[5] for r in items})},
            "questions": n,
        }

    everything = [r for items in rows.values() for r in items]
    if not everything:
        raise UserError("no question could be evaluated")
    out = summarise(everything)
    out["skipped_unparsable_gold"] = skipped
    out["store_ms_per_question"] = round(1000 * clock[0] / len(everything), 3)
    out["store_ms_per_query"] = round(1000 * clock[0] / max(clock[1], 1), 3)
    out["per_database"] = {db: summarise(items) for db, items in sorted(rows.items())}
    if by_language:
        out["per_language"] = {lang: summarise(items) for lang, items in sorted(by_language.items())}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", choices=["bird", "spider", "restaurant"], required=True)
    parser.add_argument("--root", help="dataset root (holds dev.json); not for restaurant")
    parser.add_argument("--with-evidence", action="store_true",
                        help="restaurant: retrieve each question with its evidence (BIRD always is)")
    parser.add_argument("--twins", action="store_true", help="restaurant: only the Vietnamese questions and their "
                        "English twins (same gold SQL)")
    parser.add_argument("--render", action="store_true", help="render questions not in English in English with the "
                        "settings' LM (lm, cache_dir) and search with both, as the pipeline does")
    parser.add_argument("--k", type=int, help="tables (default: settings k_tables)")
    parser.add_argument("--m", type=int, help="columns per table (default: settings m_columns)")
    parser.add_argument("--db-ids", help="comma-separated subset of databases")
    parser.add_argument("--kb-root", type=Path, default=DEFAULT_KB_ROOT, help=f"where KBs are built (default {DEFAULT_KB_ROOT})")
    parser.add_argument("--config", help="settings YAML")
    parser.add_argument("--budget", type=int, help="context budget in estimated tokens (default: settings "
                        "context_budget_tokens; 0 prunes by k and m only, as the paper)")
    parser.add_argument("--kb-store", choices=["chroma", "pgvector"], help="vector store of the KBs (default: "
                        "settings kb_store); give each store its own --kb-root, or each run re-embeds")
    parser.add_argument("--misses", type=Path, help="write the questions with something missing to this JSON file")
    parser.add_argument("--json", action="store_true", help="print JSON only")
    args = parser.parse_args(argv)
    try:
        settings = load_settings(args.config)
        if args.budget is not None:
            settings = settings.model_copy(update={"context_budget_tokens": args.budget})
        if args.kb_store is not None:
            settings = settings.model_copy(update={"kb_store": args.kb_store})
        language_of = None
        if args.dataset == "restaurant":
            questions, language_of = restaurant_questions(args.kb_root, args.twins)
        elif args.twins:
            raise UserError("--twins is for --dataset restaurant")
        elif not args.root:
            raise UserError(f"--root is required for --dataset {args.dataset}")
        else:
            questions = load_dataset(args.dataset, args.root, db_ids=parse_db_ids(args.db_ids))
        started = time.perf_counter()
        kb_dirs = build_kbs(args.dataset + ("-twins" if args.twins else ""), questions, args.kb_root, settings)
        built = time.perf_counter() - started
        misses: list = []
        started = time.perf_counter()
        with_evidence = args.dataset == "bird" or args.with_evidence
        render, rendering_clock = (renderer(settings) if args.render else (None, [0.0]))
        result = evaluate(args.dataset, questions, kb_dirs, settings, args.k, args.m, misses=misses,
                          with_evidence=with_evidence, language_of=language_of, render=render)
        result["with_evidence"] = with_evidence
        result["rendered_by"] = settings.lm if args.render else None
        result["seconds_rendering"] = round(rendering_clock[0], 2)
        result["k"] = args.k or settings.k_tables
        result["m"] = args.m or settings.m_columns
        result["context_budget_tokens"] = settings.context_budget_tokens
        result["kb_store"] = settings.kb_store
        result["seconds_build"] = round(built, 2)
        result["seconds_retrieval"] = round(time.perf_counter() - started, 2)
    except UserError as exc:
        print(f"retrieval_recall: error: {exc}", file=sys.stderr)
        return 2
    if args.misses:
        args.misses.write_text(json.dumps(misses, indent=1, ensure_ascii=False), encoding="utf-8")
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    print(f"{args.dataset}: k={result['k']} m={result['m']}  questions={result['questions']}")
    print(f"  table recall {result['table_recall']:.3f} (target >= 0.98)   all tables {result['table_all']:.3f}")
    print(f"  column recall {result['column_recall']:.3f} (target >= 0.95)   all columns {result['column_all']:.3f}")
    print(f"  vector store {settings.kb_store}: {result['store_ms_per_question']:.2f} ms a question, "
          f"{result['store_ms_per_query']:.3f} ms a query")
    print(f"  column fraction {result['column_fraction']:.3f}   budget {result['context_budget_tokens']} tokens, "
          f"pruned: " + ", ".join(f"{mode} {share:.0%}" for mode, share in result["pruned"].items()))
    for db, r in result["per_database"].items():
        print(f"  {db:28s} n={r['questions']:4d} tables {r['table_recall']:.3f} columns {r['column_recall']:.3f} "
              f"fraction {r['column_fraction']:.3f} whole {r['pruned'].get('none', 0):.0%}")
    for lang, r in result.get("per_language", {}).items():
        print(f"  language {lang:19s} n={r['questions']:4d} tables {r['table_recall']:.3f} columns "
              f"{r['column_recall']:.3f} all columns {r['column_all']:.3f} fraction {r['column_fraction']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
