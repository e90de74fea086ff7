"""Scoring speed: ``reflect-sql score`` against the official BIRD rule, both as whole processes.

The official rule (BIRD's ``evaluation.py``, as published): for each question, open the question's
SQLite database, run the predicted SQL and then the gold SQL on it, and count the prediction
correct iff ``set(pred_rows) == set(gold_rows)``; any error counts as wrong. ``--official-rule``
runs an in-repo re-implementation of that rule (written from the rule, not copied), sequentially
in one plain Python process that imports nothing but the standard library. Two deliberate
differences from the published script, neither of which changes a verdict on the predictions
generated here: it opens the database read-only (the shared files must not change, whatever a
prediction says), and it has no per-query timeout process (``func_timeout``), which only makes it
faster than the official script.

Each run times both commands as separate processes (wall clock around the process, CPU as user +
system time from ``os.wait4``), alternating which goes first, on the same predictions; the median
of ``--runs`` runs is reported with the ratio ours / official (target: <= 1.0 for both wall and
CPU). Every run compares the two sets of verdicts question by question; a disagreement is listed
and the exit code is 1. Also printed: voluntary context switches per process, the usual sign of
a process waiting for something (threads, locks) rather than working.

Predictions: by default the gold SQL of every question of BIRD dev, with every 7th one replaced
by a deliberately wrong one (no rows, a syntax error, a missing table, other rows), written
in the official BIRD format to a temporary file; ``--predictions F`` scores a file of your own in
that format instead. Blank predictions are a known difference (the official script runs the empty
string and counts it right when the gold result is empty; ``score`` counts it wrong).

Run: ``python bench/score_speed.py [--runs 5] [--root ../shared/benchmarks] [--predictions F] [--json]``
"""
# Only what the official-rule child needs is imported at the top: that process must be as lean as
# the official script (json, sqlite3, sys); the rest is imported by main().
import json
import sqlite3
import sys

BIRD_SEPARATOR = "\t----- bird -----\t"
TARGET_RATIO = 1.0
WRONG_EVERY = 7


def official_rule(questions_path: str, db_root: str, predictions_path: str, out_path: str) -> None:
    """The official BIRD verdicts, one JSON line per question in questions-file order."""
    with open(questions_path, encoding="utf-8") as fh:
        questions = json.load(fh)
    with open(predictions_path, encoding="utf-8") as fh:
        predictions = json.load(fh)
    verdicts = []
    for index, q in enumerate(questions):
        pred_sql = predictions[str(index)].split(BIRD_SEPARATOR)[0]
        db_path = f"{db_root}/{q['db_id']}/{q['db_id']}.sqlite"
        correct = False
        try:
            conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
            try:
                cursor = conn.cursor()
                cursor.execute(pred_sql)
                pred_rows = cursor.fetchall()
                cursor.execute(q["SQL"])
                gold_rows = cursor.fetchall()
                correct = set(pred_rows) == set(gold_rows)
            finally:
                conn.close()
        except Exception:  # the official rule: any error is a wrong prediction
            correct = False
        verdicts.append({"question_id": q["question_id"], "difficulty": q.get("difficulty"), "correct": correct})
    with open(out_path, "w", encoding="utf-8") as fh:
        for v in verdicts:
            fh.write(json.dumps(v) + "\n")
    totals, hits = {}, {}
    for v in verdicts:
        for bucket in (v["difficulty"], "overall"):
            totals[bucket] = totals.get(bucket, 0) + 1
            hits[bucket] = hits.get(bucket, 0) + v["correct"]
    print(json.dumps({k: round(100.0 * hits[k] / totals[k], 2) for k in totals}))


def wrong_sql(gold: str, kind: int) -> str:
    """A deliberately wrong prediction of four kinds: no rows, a syntax error, a missing table, other rows."""
    body = gold.strip().rstrip(";")
    if kind == 0:
        return f"SELECT * FROM ({body}) LIMIT 0"
    if kind == 1:
        return body.replace("SELECT", "SELEC", 1) if "SELECT" in body else "SELEC 1"
    if kind == 2:
        return "SELECT COUNT(*) FROM no_such_table_in_this_database"
    return "SELECT 'not the answer', 42"


def make_predictions(questions: list[dict], path) -> int:
    """The gold SQL as predictions, every WRONG_EVERY-th one replaced by a wrong one; returns how many."""
    out, wrong = {}, 0
    for index, q in enumerate(questions):
        sql = q["SQL"]
        if index % WRONG_EVERY == WRONG_EVERY - 1:
            sql = wrong_sql(sql, wrong % 4)
            wrong += 1
        out[str(index)] = f"{sql}{BIRD_SEPARATOR}{q['db_id']}"
    path.write_text(json.dumps(out, indent=1, ensure_ascii=False), encoding="utf-8")
    return wrong


def _timed(cmd: list[str], env: dict) -> dict:
    """Runs ``cmd`` to completion: wall seconds, CPU seconds (user + system) and context switches."""
    import os
    import subprocess
    import tempfile
    import time

    # Output goes to files, not pipes: wait4 (this child's own rusage) must not wait on a full pipe.
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(), err.read().decode()
    if proc.returncode != 0:
        raise SystemExit(f"score_speed: {' '.join(cmd[:4])} ... exited {proc.returncode}:\n{stderr[-3000:]}")
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "user_s": usage.ru_utime,
            "sys_s": usage.ru_stime, "voluntary_switches": usage.ru_nvcsw, "stdout": stdout}


def _verdicts(path, key: str = "question_id") -> dict[str, bool]:
    with open(path, encoding="utf-8") as fh:
        return {str(json.loads(line)[key]): bool(json.loads(line)["correct"]) for line in fh if line.strip()}


def _score_command() -> list[str]:
    from pathlib import Path

    script = Path(sys.executable).with_name("reflect-sql")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "reflect_sql"]


def main(argv: list[str] | None = None) -> int:
    import argparse
    import os
    import shlex
    import statistics
    import tempfile
    from pathlib import Path

    here = Path(__file__).resolve()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path,
                        default=Path(os.environ.get("REFLECT_SQL_BENCHMARKS") or here.parents[2] / "shared" / "benchmarks"),
                        help="the shared benchmarks folder (holding bird/)")
    parser.add_argument("--runs", type=int, default=5, help="timed runs of each command; the median is reported (default 5)")
    parser.add_argument("--predictions", type=Path, help="a predictions file in the official BIRD format "
                                                         "(default: gold SQL with every 7th prediction made wrong)")
    parser.add_argument("--score-command", metavar="CMD", help="the command timed as ours, e.g. another checkout's "
                                                               "(default: the reflect-sql beside this Python)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    bird = args.root / "bird"
    questions_path, db_root = bird / "dev.json", bird / "dev_databases"
    if not questions_path.is_file():
        print(f"score_speed: no BIRD dev questions at {questions_path}", file=sys.stderr)
        return 2
    questions = json.loads(questions_path.read_text(encoding="utf-8"))
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}

    with tempfile.TemporaryDirectory(prefix="score-speed-") as tmp:
        tmp = Path(tmp)
        predictions, wrong_made = args.predictions, None
        if predictions is None:
            predictions = tmp / "predict_dev.json"
            wrong_made = make_predictions(questions, predictions)
        ours_cmd = [*(shlex.split(args.score_command) if args.score_command else _score_command()), "score", "--dataset", "bird", "--questions", str(questions_path),
                    "--db-root", str(db_root), "--predictions", str(predictions), "--json",
                    "--details", str(tmp / "ours.jsonl")]
        official_cmd = [sys.executable, str(here), "--official-rule", str(questions_path), str(db_root),
                        str(predictions), str(tmp / "official.jsonl")]
        ours_runs, official_runs, disagreements = [], [], {}
        ours_table = official_table = None
        index_of = {str(q["question_id"]): i for i, q in enumerate(questions)}
        for run in range(args.runs):
            order = (("ours", ours_cmd), ("official", official_cmd))
            for name, cmd in order if run % 2 == 0 else reversed(order):
                result = _timed(cmd, env)
                (ours_runs if name == "ours" else official_runs).append(result)
            ours_table = json.loads(ours_runs[-1]["stdout"])
            official_table = json.loads(official_runs[-1]["stdout"])
            ours_v, official_v = _verdicts(tmp / "ours.jsonl"), _verdicts(tmp / "official.jsonl")
            for qid in sorted(set(ours_v) | set(official_v), key=lambda k: index_of.get(k, -1)):
                if ours_v.get(qid) != official_v.get(qid):
                    disagreements[qid] = {"ours": ours_v.get(qid), "official": official_v.get(qid)}

    def med(runs: list[dict], key: str) -> float:
        return statistics.median(r[key] for r in runs)

    ours = {k: round(med(ours_runs, k), 3) for k in ("wall_s", "cpu_s", "user_s", "sys_s", "voluntary_switches")}
    official = {k: round(med(official_runs, k), 3) for k in ("wall_s", "cpu_s", "user_s", "sys_s", "voluntary_switches")}
    result = {
        "questions": len(questions),
        "deliberately_wrong": wrong_made,
        "runs": args.runs,
        "overall_ex": {"ours": ours_table.get("overall"), "official": official_table.get("overall")},
        "verdicts_agree": not disagreements,
        "disagreements": disagreements,
        "ours": ours,
        "official_rule": official,
        "ratio": {"wall": round(ours["wall_s"] / official["wall_s"], 3),
                  "cpu": round(ours["cpu_s"] / official["cpu_s"], 3)},
        "target_ratio": TARGET_RATIO,
        "cpus": os.cpu_count(),
        "load_average_1min": round(os.getloadavg()[0], 2),
        # Without a bytecode cache every module ours imports is compiled on each run; the official
        # script is one file, compiled every time either way.
        "pythondontwritebytecode": bool(os.environ.get("PYTHONDONTWRITEBYTECODE")),
    }
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print(f"{result['questions']} BIRD dev questions, median of {args.runs} whole-process runs each, "
              f"{os.cpu_count()} CPUs (load average {result['load_average_1min']})"
              + (", PYTHONDONTWRITEBYTECODE set: modules compiled on every run" if result["pythondontwritebytecode"] else ""))
        for label, r in (("reflect-sql score", ours), ("official rule", official)):
            print(f"  {label:18} wall {r['wall_s']:.3f} s  CPU {r['cpu_s']:.3f} s (user {r['user_s']:.3f}, "
                  f"sys {r['sys_s']:.3f})  voluntary context switches {r['voluntary_switches']:.0f}")
        print(f"  ours / official: wall {result['ratio']['wall']:.3f}, CPU {result['ratio']['cpu']:.3f} "
              f"(target <= {TARGET_RATIO:g})")
        print(f"  EX overall: ours {result['overall_ex']['ours']}, official {result['overall_ex']['official']}; "
              f"verdicts agree on every question: {result['verdicts_agree']}")
        for qid, d in disagreements.items():
            print(f"    question {qid}: ours {d['ours']}, official {d['official']}")
    return 0 if not disagreements else 1


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "--official-rule":
        official_rule(*sys.argv[2:])
        sys.exit(0)
    sys.exit(main())
