"""Framework overhead of the full Reflect-SQL pipeline, measured with a zero-latency scripted LM.

The oracle LM (``experiments/scripted.py``) answers at once, so a question's time is everything
but the model: SQL execution and compilation checks (the engine), retrieval (embedding + vector
search), and framework code (DSPy adapters formatting prompts and parsing replies, the loops,
checks, tracing, accounting). The run goes through the real evaluation runner and engine.

Printed per question: seconds (mean and median), and the shares of SQL, retrieval, LM and the
rest. With ``--against SUMMARY.json`` (an eval run with the embedded model) it also reports the
non-LM time as a share of a pipeline question with the embedded LM:
``overhead = non_lm_s / (non_lm_s + embedded_lm_s_per_question)`` (target: <= 10%).

Run: ``python bench/overhead.py --json [--limit N] [--no-kb] [--against runs/full/summary.json]``
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from reflect_sql.cli.common import add_json_arg, add_out_arg, add_set_arg  # noqa: E402
from reflect_sql.errors import UserError  # noqa: E402
from reflect_sql.experiments.config import load_config  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


class Stopwatch:
    """Accumulates the time spent inside wrapped methods (outermost call only, per thread)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.calls: dict[str, int] = {}
        self._lock = threading.Lock()
        self._depth = threading.local()

    def wrap(self, cls: type, method: str, label: str) -> None:
        original = getattr(cls, method)
        watch = self

        def timed(*args, **kwargs):
            depth = getattr(watch._depth, label, 0)
            setattr(watch._depth, label, depth + 1)
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                setattr(watch._depth, label, depth)
                if depth == 0:
                    with watch._lock:
                        watch.seconds[label] = watch.seconds.get(label, 0.0) + time.perf_counter() - start
                        watch.calls[label] = watch.calls.get(label, 0) + 1

        setattr(cls, method, timed)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", default=os.environ.get("REFLECT_SQL_BENCHMARKS", str(REPO.parent / "shared" / "benchmarks")),
                        help="the shared benchmarks folder (holding bird/)")
    parser.add_argument("--limit", type=int, help="only the first N questions (default: all)")
    parser.add_argument("--no-kb", action="store_true", help="whole-schema context instead of KB retrieval")
    parser.add_argument("--kb-cache", default=None, help="where KBs are built and reused (default: a temp dir)")
    add_set_arg(parser, "override a setting, e.g. use_enrichment=false")
    add_out_arg(parser, "keep the run's output here (default: a temp dir, removed)")
    parser.add_argument("--against", metavar="SUMMARY.json", help="an eval summary with the embedded LM")
    add_json_arg(parser)
    args = parser.parse_args(argv)

    from reflect_sql.db.sqlite import SQLiteEngine
    from reflect_sql.experiments.pipeline import PipelineFactory
    from reflect_sql.experiments.runner import run_eval
    from reflect_sql.experiments.scripted import oracle_lms
    from reflect_sql.kb.retrieve import Retriever

    watch = Stopwatch()
    for method in ("execute", "check"):
        watch.wrap(SQLiteEngine, method, "sql")
    watch.wrap(Retriever, "retrieve", "retrieval")

    with tempfile.TemporaryDirectory(prefix="overhead-") as tmp:
        tmp = Path(tmp)
        kb_cache = Path(args.kb_cache) if args.kb_cache else tmp / "kb"
        config_path = tmp / "overhead.yaml"
        config_path.write_text(json.dumps({
            "name": "overhead", "dataset": {"format": "bird", "root": str(Path(args.root) / "bird"), "limit": args.limit},
            "mode": "reflect", "threads": 1, "mlflow": {"enabled": False},
            "kb": {"enabled": not args.no_kb, "cache": str(kb_cache)},
            "settings": {"lm_cache": False, "cache_dir": str(tmp / "dspy")},
        }))
        config = load_config(config_path, args.set_)
        questions = config.dataset.load()
        run_dir = Path(args.out) if args.out else tmp / "run"
        factory = PipelineFactory(config, run_dir, lms=oracle_lms(questions))
        # Build KBs and load the embedding model before the clock runs: one-time costs, not per question.
        for db_id in dict.fromkeys(q.db_id for q in questions):
            first = next(q for q in questions if q.db_id == db_id)
            factory(first)
            if not args.no_kb:
                warm = Retriever(factory.kb_dir(first), config.settings)
                warm.retrieve("warm up", config.settings.k_tables, config.settings.m_columns)
                warm.close()
        watch.seconds.clear()
        watch.calls.clear()
        started = time.perf_counter()
        summary = run_eval(config, run_dir, factory, progress=not args.json)
        wall = time.perf_counter() - started
        records = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]

    per_q = [r["cost"]["seconds"] for r in records]
    n = len(per_q)
    total = sum(per_q)
    sql = watch.seconds.get("sql", 0.0)
    retrieval = watch.seconds.get("retrieval", 0.0)
    lm = sum(r["cost"]["lm_seconds"] for r in records)
    framework = max(0.0, total - sql - retrieval - lm)
    result = {
        "questions": n,
        "ex_overall": summary["overall"],
        "kb": not args.no_kb,
        "seconds_per_question": round(total / n, 4),
        "median_seconds_per_question": round(statistics.median(per_q), 4),
        "lm_calls_per_question": round(sum(r["cost"]["lm_calls"] for r in records) / n, 2),
        "share": {
            "sql": round(sql / total, 4),
            "retrieval": round(retrieval / total, 4),
            "lm_scripted": round(lm / total, 4),
            "framework": round(framework / total, 4),
        },
        "seconds_per_question_by_part": {
            "sql": round(sql / n, 4), "retrieval": round(retrieval / n, 4),
            "lm_scripted": round(lm / n, 4), "framework": round(framework / n, 4),
        },
        "sql_calls_per_question": round(watch.calls.get("sql", 0) / n, 2),
        "harness_wall_seconds": round(wall, 2),
    }
    if args.against:
        try:
            against = json.loads(Path(args.against).read_text())
            embedded_lm = against["cost"]["per_question"]["lm_seconds"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise UserError(f"--against {args.against}: not an eval summary with cost.per_question.lm_seconds ({exc})")
        non_lm = (total - lm) / n
        result["embedded_lm_seconds_per_question"] = embedded_lm
        result["overhead_share_with_embedded_lm"] = round(non_lm / (non_lm + embedded_lm), 4)
        result["framework_share_with_embedded_lm"] = round((framework / n) / (non_lm + embedded_lm), 4)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for key, value in result.items():
            print(f"{key}: {value}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except UserError as exc:
        print(f"overhead: error: {exc}", file=sys.stderr)
        sys.exit(2)
