"""Evaluate a program over a dataset: threads, a live progress bar, resumable per-question results.

Output directory:
  run.json          config, fingerprint, the compiled program (path, or "none" for the bare
                    signatures, and sha256) and sessions, each with the git commit it ran on (a
                    rerun with the same --out resumes; a different config or program is refused)
  results.jsonl     one line per finished question, in finishing order (see ``ResultsLog``)
  traces/<id>.json  the full trace of each question, written before its results line
  summary.json      the ``score --json`` keys plus cost, recall and status counts, in question order
  predict_<split>.json   the official BIRD predictions format (also for Spider, for ``score``)
  predicted_<split>.sql  Spider only: one SQL per line, the official Spider evaluator's input

The program contract (``programs.build_program``): ``program(question=..., evidence=...)`` returns
a prediction with ``sql, columns, rows, scores, trace, cost, error, retrieved``; any of them may be
missing. The program is obtained per question from a factory, so each worker thread and database
can have its own (engines and retrievers are not shared between threads).
"""
from __future__ import annotations

import hashlib
import json
import sys
import threading
import time
from collections import Counter
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any, Callable, Iterable

from tqdm import tqdm

from reflect_sql.errors import InvalidQuestion, UserError
from reflect_sql.experiments.config import EvalConfig
from reflect_sql.experiments.datasets import Question
from reflect_sql.experiments.pipeline import PipelineFactory
from reflect_sql.experiments.tracking import git_commit
from reflect_sql.experiments.metrics import (
    accuracy_table,
    aggregate_cost,
    gold_tables_and_columns,
    match,
    mean,
    retrieval_recall,
    sqlite_mapping,
)
from reflect_sql.experiments.predictions import write_bird_predictions
from reflect_sql.experiments.report import write_run_reports
from reflect_sql.experiments.results_log import ResultsLog
from reflect_sql.experiments.shutdown import finish_in_flight, raise_if_requested, stop_at_next_lm_call
from reflect_sql.files import atomic_file
from reflect_sql.lm.accounting import CostMeter
from reflect_sql.lm.local_engine import forget_prompt_caches
from reflect_sql.programs.shipped import ProgramChoice, bare_predictors, resolve_program
from reflect_sql.programs.trace import json_safe
from reflect_sql.settings import SettingsError

ProgramFactory = Callable[[Question], Callable[..., Any]]
RESULTS = "results.jsonl"
_POLL_S = 0.2  # how often the main thread looks for a request to stop while questions run


def _field(pred: Any, name: str, default: Any = None) -> Any:
    if pred is None:
        return default
    if isinstance(pred, dict):
        return pred.get(name, default)
    try:
        value = getattr(pred, name)
    except (AttributeError, KeyError):
        return default
    return default if value is None else value


def rows_digest(rows: Any) -> str | None:
    """A short hash of the rows the program returned, in order: equal digests, equal answers."""
    if rows is None:
        return None
    text = json.dumps(json_safe(list(rows)), ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def trace_steps(trace: Any) -> list[dict[str, Any]]:
    if trace is None:
        return []
    if hasattr(trace, "to_json"):
        trace = trace.to_json()
    elif hasattr(trace, "steps"):
        trace = trace.steps
    return [json_safe(s) for s in trace]


def summarize_trace(steps: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-step loop, round, decision, scores and failure: enough to follow the path taken."""
    compact = [
        {k: s.get(k) for k in ("loop", "round", "iteration", "decision", "scores", "failure") if s.get(k) not in (None, "", {})}
        for s in steps if isinstance(s, dict)
    ]
    by_loop = Counter(s.get("loop", "?") for s in compact)
    rounds = max((s.get("round") or 0 for s in compact), default=0)
    return {"steps": len(compact), "rounds": rounds, "by_loop": dict(by_loop), "path": compact}


def _cost(pred: Any, metered: dict[str, Any], seconds: float) -> dict[str, Any]:
    """LM calls, tokens and LM seconds as the meter around the question saw them (the program's own
    ``cost`` when nothing was metered, e.g. a program that does not go through DSPy), and wall time."""
    source = metered if metered.get("lm_calls") else (_field(pred, "cost") or {})
    cost = {
        "lm_calls": int(source.get("lm_calls") or 0),
        "prompt_tokens": int(source.get("prompt_tokens") or 0),
        "completion_tokens": int(source.get("completion_tokens") or 0),
        # Prompt tokens the engine's prefix cache served instead of computing them (llama.cpp reports it).
        "cached_prompt_tokens": int(source.get("cached_prompt_tokens") or 0),
        "lm_seconds": round(float(metered.get("seconds") or 0.0), 3),
        "seconds": round(seconds, 3),
        "cache_hits": int(metered.get("cache_hits") or 0),
    }
    # Had no response cache been shared with an earlier run: its hits at what they first cost.
    lm_alone = float(metered.get("alone_seconds") or cost["lm_seconds"])
    cost.update({
        "alone_prompt_tokens": int(source.get("alone_prompt_tokens") or cost["prompt_tokens"]),
        "alone_completion_tokens": int(source.get("alone_completion_tokens") or cost["completion_tokens"]),
        "alone_lm_seconds": round(lm_alone, 3),
        "alone_seconds": round(seconds + lm_alone - cost["lm_seconds"], 3),
        "cache_hits_of_unknown_cost": int(metered.get("cache_hits_of_unknown_cost") or 0),
    })
    return cost


def evaluate_question(fmt: str, q: Question, program: Callable[..., Any], score_timeout_s: float,
                      max_value_bytes: int) -> tuple[dict[str, Any], list]:
    """Run the program on one question and score it; returns the results record and the full trace."""
    started = time.perf_counter()
    pred, exception, invalid = None, None, None
    with CostMeter() as meter:
        try:
            pred = program(question=q.question, evidence=q.evidence)
        except InvalidQuestion as exc:
            invalid = f"question {q.question_id} cannot be asked: {exc}"
        except (UserError, SettingsError):
            raise  # a configuration problem: every question would fail the same way
        except Exception as exc:  # noqa: BLE001 - one question failing must not end the run
            exception = f"{type(exc).__name__}: {exc}"
    seconds = time.perf_counter() - started
    sql = _field(pred, "sql")
    verdict = match(fmt, sql, q.gold_sql, q.db_path, score_timeout_s, max_value_bytes)
    retrieved = json_safe(_field(pred, "retrieved"))
    recall = {"table_recall": None, "column_recall": None}
    if retrieved:
        tables, columns = gold_tables_and_columns(q.gold_sql, sqlite_mapping(str(q.db_path)))
        recall = retrieval_recall(tables, columns, retrieved)
    steps = trace_steps(_field(pred, "trace"))
    rows = _field(pred, "rows")
    record = {
        "question_id": q.question_id,
        "index": q.index,
        "db_id": q.db_id,
        "difficulty": q.difficulty,
        "question": q.question,
        "sql": sql,
        "correct": verdict.correct,
        "status": verdict.status,
        "detail": verdict.detail,
        "rows_digest": rows_digest(rows),
        "row_count": None if rows is None else len(rows),
        "scores": json_safe(_field(pred, "scores") or {}),
        "recall": recall,
        "retrieved": retrieved,
        "trace": summarize_trace(steps),
        "cost": _cost(pred, meter.summary(), seconds),
        # error: what the program reported (e.g. its SQL failed); exception: the program crashed.
        "error": exception or invalid or _field(pred, "error"),
        "exception": exception,
    }
    return record, steps


def _write_json(path: Path, data: Any) -> None:
    with atomic_file(path) as tmp:
        tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def _short(sha: str | None) -> str:
    return sha[:12] if sha else "none"


def _open_run(config: EvalConfig, out: Path, program: dict[str, Any]) -> dict[str, Any]:
    """run.json of ``out``: a new one, or the one a resumed run left, which must match the
    configuration (fingerprint) and the compiled program (its sha256) of this session."""
    meta_path = out / "run.json"
    fingerprint = config.fingerprint()
    if meta_path.exists():
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
        except ValueError:
            raise UserError(f"{meta_path} is not valid JSON; use another --out") from None
        if meta.get("fingerprint") != fingerprint:
            raise UserError(
                f"{out} holds a run of a different configuration (fingerprint {meta.get('fingerprint')} vs "
                f"{fingerprint}: mode, dataset or settings differ); use another --out to start a new run"
            )
        recorded = meta.get("program")
        if recorded is None:  # a run started before programs were recorded
            meta["program"] = program
        elif recorded.get("sha256") != program["sha256"]:
            raise UserError(
                f"{out} holds a run of program {recorded.get('path')} (sha256 {_short(recorded.get('sha256'))}), "
                f"not {program['path']} (sha256 {_short(program['sha256'])}); resume it with --program "
                f"{recorded.get('path')}, or use another --out to start a new run"
            )
        return meta
    return {
        "name": config.name, "fingerprint": fingerprint, "mode": config.mode,
        "dataset": config.dataset.to_json(), "settings": config.settings.model_dump(mode="json"),
        "config": str(config.source) if config.source else None, "program": program, "sessions": [],
    }


def summarize(config: EvalConfig, questions: list[Question], records: list[dict[str, Any]], meta: dict[str, Any]) -> dict[str, Any]:
    table = accuracy_table(((r["difficulty"], r["correct"]) for r in records), by_difficulty=config.dataset.format == "bird")
    return {
        **table,
        "cost": aggregate_cost(r.get("cost") for r in records),
        "recall": {
            "table": mean(r["recall"].get("table_recall") for r in records),
            "column": mean(r["recall"].get("column_recall") for r in records),
        },
        "statuses": dict(Counter(r["status"] for r in records)),
        "errors": sum(1 for r in records if r.get("error")),
        "exceptions": sum(1 for r in records if r.get("exception")),
        "questions": len(questions),
        "finished": len(records),
        "name": config.name,
        "mode": config.mode,
        "dataset": config.dataset.to_json(),
        "fingerprint": meta["fingerprint"],
        "program": meta.get("program"),
        "wall_seconds": round(sum(s.get("seconds", 0.0) for s in meta.get("sessions", [])), 3),
    }


class _Progress:
    """tqdm bar whose postfix shows the running EX and cost of the finished questions."""

    def __init__(self, total: int, done: Iterable[dict[str, Any]], enabled: bool, name: str):
        self.correct = self.n = self.calls = self.tokens = 0
        for r in done:
            self._count(r)
        self.bar = None
        if enabled:
            self.bar = tqdm(total=total, initial=self.n, desc=name, unit="q", dynamic_ncols=True)
            self._show()

    def _count(self, r: dict[str, Any]) -> None:
        self.n += 1
        self.correct += bool(r.get("correct"))
        cost = r.get("cost") or {}
        self.calls += cost.get("lm_calls") or 0
        self.tokens += (cost.get("prompt_tokens") or 0) + (cost.get("completion_tokens") or 0)

    def _show(self) -> None:
        if self.bar is not None and self.n:
            self.bar.set_postfix_str(
                f"EX {100 * self.correct / self.n:.1f}% | {self.calls / self.n:.1f} calls/q | {self.tokens / self.n:.0f} tok/q")

    def update(self, r: dict[str, Any]) -> None:
        self._count(r)
        if self.bar is not None:
            self.bar.update(1)
            self._show()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def run_eval(
    config: EvalConfig,
    out: str | Path,
    factory: ProgramFactory | None = None,
    *,
    progress: bool = True,
    retry_errors: bool = False,
    program: str | Path | None = None,
    tracker: Any | None = None,
) -> dict[str, Any]:
    """Evaluate (or finish evaluating) ``config`` into ``out``; returns the summary.

    Without a ``factory``, the pipeline runs with the compiled program ``program`` resolves to
    (``programs.shipped.resolve_program``: None is the program shipped for the generator LM,
    "none" the bare signatures); a factory brings its own (``factory.program``), and one that
    does not say is recorded as the caller's.

    ``tracker``: the run's live MLflow run (``experiments.tracking.EvalRun``), begun before the
    first question (and before the pipeline's LMs load), told of each finished question, and ended
    FINISHED after the reports are written, or FAILED / KILLED when the evaluation raises.
    """
    questions = config.dataset.load()
    out = Path(out)
    if factory is None:
        choice = resolve_program(program, config.settings.lm)
    elif program is not None:
        raise ValueError("run_eval: pass a program or a factory, not both")
    else:
        choice = getattr(factory, "program", None)
    if isinstance(choice, ProgramChoice):
        record = choice.to_json()
        # A run that loads a file but asks some roles bare must say so: their demos are not in it.
        record["bare_predictors"] = bare_predictors(choice, config.settings, config.mode)
        if record["bare_predictors"]:
            print(f"reflect-sql: note: {choice.path} is not loaded into {', '.join(record['bare_predictors'])} "
                  "(asked in another form, not in the file, or run on another LM): they run bare", file=sys.stderr)
    else:
        record = {"path": None, "sha256": None, "source": "caller's factory"}
    (out / "traces").mkdir(parents=True, exist_ok=True)
    # Cold prompt caches: the embedded engine keeps earlier prompts' states in RAM, and a variant run
    # after another in this process would otherwise be served the heads its predecessor computed.
    forget_prompt_caches()
    meta = _open_run(config, out, record)
    # The commit of the code this session runs: a resumed run may finish on different code.
    session = {"started": time.strftime("%Y-%m-%dT%H:%M:%S"), "commit": git_commit(), "seconds": 0.0, "evaluated": 0}
    meta["sessions"].append(session)
    _write_json(out / "run.json", meta)
    try:
        summary = _evaluate(config, questions, out, meta, session, factory, choice, progress, retry_errors, tracker)
    except BaseException as exc:
        if tracker is not None:
            tracker.abort(exc)
        raise
    if tracker is not None:
        tracker.finish(out, summary)
    return summary


def _evaluate(config: EvalConfig, questions: list[Question], out: Path, meta: dict[str, Any], session: dict[str, Any],
              factory: ProgramFactory | None, choice: Any, progress: bool, retry_errors: bool,
              tracker: Any | None) -> dict[str, Any]:
    with ResultsLog(out / RESULTS) as log:
        if retry_errors:
            log.rewrite_without({k for k, r in log.records.items() if r.get("exception")})
        todo = [q for q in questions if q.key not in log]
        done = [log.records[q.key] for q in questions if q.key in log]
        if tracker is not None:
            tracker.begin(out, meta, done, len(todo))
            _write_json(out / "run.json", meta)  # the MLflow run id, for a resumed run to continue it
        if factory is None:
            factory = PipelineFactory(config, out, program=choice)
        started = time.perf_counter()
        earlier = sum(float(s.get("seconds") or 0.0) for s in meta["sessions"] if s is not session)
        bar = _Progress(len(questions), done, progress, config.name)

        stop = threading.Event()  # set when the run is stopped: questions in flight end at their next LM call

        def work(q: Question) -> tuple[dict[str, Any], list]:
            traced: dict[str, Any] = {}

            # The program is made inside the question's own error handling: a database that cannot
            # be opened fails its questions (and is tried again for the next one), not the run.
            def program(**inputs: Any) -> Any:
                if tracker is None:
                    return factory(q)(**inputs)
                return tracker.call(q, lambda: factory(q)(**inputs), traced)

            with stop_at_next_lm_call(stop):
                record, steps = evaluate_question(config.dataset.format, q, program, config.score_timeout_s,
                                                  config.settings.max_value_bytes)
            if traced.get("trace_id"):
                record["mlflow_trace_id"] = traced["trace_id"]
            return record, steps

        pool = ThreadPoolExecutor(max_workers=config.threads, thread_name_prefix="eval")
        try:
            # Submit a bounded window so that an interrupted run has not queued work it never did.
            pending: dict[Any, Question] = {}
            queue = iter(todo)
            for q in queue:
                pending[pool.submit(work, q)] = q
                if len(pending) >= config.threads * 2:
                    break

            def keep(q: Question, record: dict[str, Any], steps: list) -> None:
                _write_json(out / "traces" / f"{q.key}.json", steps)
                log.append(record)
                session["evaluated"] += 1
                # Kept current, so that a killed session still counts in the run's wall time.
                session["seconds"] = round(time.perf_counter() - started, 3)
                _write_json(out / "run.json", meta)
                bar.update(record)
                if tracker is not None:
                    tracker.question(record, earlier + session["seconds"])

            try:
                while pending:
                    raise_if_requested()  # a SIGTERM or Ctrl-C under experiments.shutdown
                    finished, _ = wait(pending, timeout=_POLL_S, return_when=FIRST_COMPLETED)
                    for future in finished:
                        q = pending.pop(future)
                        keep(q, *future.result())
                        nxt = next(queue, None)
                        if nxt is not None:
                            pending[pool.submit(work, nxt)] = nxt
            except KeyboardInterrupt:  # Ctrl-C or SIGTERM (experiments.shutdown)
                stop.set()
                for future, q in finish_in_flight(pending, config.settings.lm_timeout_s):
                    keep(q, *future.result())
                raise
        finally:
            pool.shutdown(wait=False, cancel_futures=True)
            bar.close()
            if hasattr(factory, "close"):
                factory.close()
            session["seconds"] = round(time.perf_counter() - started, 3)
            _write_json(out / "run.json", meta)
        records = [log.records[q.key] for q in questions if q.key in log]

    summary = summarize(config, questions, records, meta)
    _write_json(out / "summary.json", summary)
    s = config.settings
    write_run_reports(out, records, summary, {"theta_r": s.theta_r, "theta_s": s.theta_s, "theta_e": s.theta_e})
    sql_by_key = {str(r["question_id"]): r.get("sql") for r in records}
    write_bird_predictions(out / f"predict_{config.dataset.split}.json", questions, sql_by_key)
    if config.dataset.format == "spider":
        lines = [" ".join((sql_by_key.get(q.key) or "").split()) for q in questions]
        (out / f"predicted_{config.dataset.split}.sql").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return summary
