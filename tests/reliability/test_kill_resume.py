"""An evaluation SIGKILLed at random points, again and again, resumes with nothing lost or doubled,
and ends with the same answers as a run that was never interrupted.

The real pipeline runs (engine, loops, checks) with an honest scripted LM slowed a little per call,
on two threads, so that kills land anywhere: in the middle of a question, between answers, while a
results line is being written.
"""
from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import reliability_cases as cases

HERE = Path(__file__).resolve().parent
KILLS = 4
KEEP = ("question_id", "sql", "correct", "status", "rows_digest", "row_count", "error")

SCRIPT = textwrap.dedent(
    """
    import sys, time
    sys.path.insert(0, sys.argv[3])
    import reliability_cases as cases
    from reflect_sql.experiments.config import load_config
    from reflect_sql.experiments.pipeline import PipelineFactory
    from reflect_sql.experiments.runner import run_eval
    from reflect_sql.lm.scripted import ScriptedLM

    config = load_config(sys.argv[1])
    honest = cases.oracle({q: gold for q, gold in cases.QUESTIONS})
    delay = float(sys.argv[4])

    def slow(name, inputs):
        time.sleep(delay)  # a model that takes its time
        return honest(name, inputs)

    lms = (ScriptedLM(slow, role="generator"), ScriptedLM(slow, role="judge"))
    run_eval(config, sys.argv[2], PipelineFactory(config, sys.argv[2], lms=lms), progress=False)
    """
)


@pytest.mark.slow
def test_sigkill_at_random_points_then_resume(shop_copy, tmp_path, ledger, sigkill_after):
    rows = [(f"q{i}", "shop", q, gold) for i, (q, gold) in enumerate(cases.QUESTIONS)]
    root = cases.write_dataset(tmp_path / "data", {"shop": shop_copy}, rows)
    config = tmp_path / "c.yaml"
    config.write_text(f"dataset: {{format: bird, root: {root}}}\nmlflow: {{enabled: false}}\nkb: {{enabled: false}}\n"
                      "threads: 2\nscore_timeout_s: 5\nsettings: {lm_cache: false}\n")
    script = tmp_path / "run.py"
    script.write_text(SCRIPT)
    out = tmp_path / "out"
    results = out / "results.jsonl"
    seed = int(time.time())
    rng = random.Random(seed)
    why = f"(seed {seed})"

    kept: list[str] = []  # ids finished before the last kill: they must stay, in place
    for _ in range(KILLS):
        # Wait for a random number of new answers (at least one: the kill lands mid-run), then
        # a random moment more, which may fall inside the writing of the next line.
        target = rng.randint(1, max(1, (len(rows) - len(kept)) // 3))
        extra = rng.uniform(0, 0.15)
        code, ids = sigkill_after([sys.executable, str(script), str(config), str(out), str(HERE), "0.08"],
                                  results, answers=len(kept) + target, extra_s=extra)
        assert code == -signal.SIGKILL, f"the run ended before its kill {why}"
        assert ids[: len(kept)] == kept, f"finished answers were lost or moved {why}"
        assert len(ids) == len(set(ids)), f"an answer was written twice {why}"
        assert len(ids) < len(rows), f"the kill came too late to test anything {why}"
        cut = results.exists() and not results.read_bytes().endswith(b"\n") and results.stat().st_size > 0
        ledger.resumes.append(f"killed at {len(ids)}/{len(rows)}" + (" mid-line" if cut else ""))
        kept = ids

    subprocess.run([sys.executable, str(script), str(config), str(out), str(HERE), "0"], check=True, timeout=300)
    lines = results.read_bytes().splitlines(keepends=True)
    ids = [json.loads(line)["question_id"] for line in lines if line.endswith(b"\n")]
    assert len(lines) == len(ids) == len(rows) and set(ids) == {r[0] for r in rows}, why
    assert ids[: len(kept)] == kept, why
    assert len(json.loads((out / "run.json").read_text())["sessions"]) == KILLS + 1, why
    assert all((out / "traces" / f"{q}.json").is_file() for q in ids)

    # The same answers as an uninterrupted run of the same configuration.
    from reflect_sql.experiments.config import load_config
    from reflect_sql.experiments.pipeline import PipelineFactory
    from reflect_sql.experiments.runner import run_eval
    from reflect_sql.lm.scripted import ScriptedLM

    honest = cases.oracle({q: gold for q, gold in cases.QUESTIONS})
    ref = tmp_path / "reference"
    loaded = load_config(config)
    run_eval(loaded, ref, PipelineFactory(loaded, ref, lms=(ScriptedLM(honest), ScriptedLM(honest))), progress=False)

    def answers(path: Path) -> dict[str, dict]:
        return {r["question_id"]: {k: r[k] for k in KEEP} for r in map(json.loads, path.read_text().splitlines())}

    assert answers(results) == answers(ref / "results.jsonl"), why
    summary = json.loads((out / "summary.json").read_text())
    assert summary["finished"] == len(rows) and summary["overall"] == 100.0
    ledger.resumes[-1] += f"; resumed to {len(rows)} answers, none lost or doubled, equal to an uninterrupted run {why}"
