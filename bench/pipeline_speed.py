"""What the full pipeline costs against a single pass, in DSPy's prompt layout and in the shared-head one.

Four variants answer the same seeded BIRD dev questions with the embedded model, each with its own
DSPy response cache under ``--out`` (empty on a fresh ``--out``; a resumed run keeps it): what a
user's first run pays, where a call repeated within a question (the same prompt at the same
temperature) is served by the cache, as under the defaults, and no variant is served another's
calls. ``lm_calls`` counts the calls the cache served too (``cache_hits``). Single-pass and full, each with
``prompt_layout: dspy`` and ``prompt_layout: shared_head``. For each question and variant it prints
the prompt tokens the engine computed and those its prefix cache reused, the completion tokens,
the seconds and whether the answer was right; then, per layout, full's seconds per question as a
multiple of single-pass's (target: at most 3x) and EX (full must not be below single-pass).

Runs go through the evaluation runner into ``--out``, one folder per variant, so rerunning the same
command resumes where it stopped. ``--oracle`` answers with the zero-latency oracle LM instead of
the model (the tests use it; the figures are then meaningless).

Run: ``python bench/pipeline_speed.py --json [--questions 10] [--lm local/qwen2.5-coder-0.5b] [--out DIR]
[--layouts dspy] [--set adapter=json]``
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from reflect_sql.cli.common import add_json_arg, add_out_arg, add_set_arg  # noqa: E402
from reflect_sql.errors import UserError  # noqa: E402
from reflect_sql.experiments.config import load_config  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
LAYOUTS = ("dspy", "shared_head")
MODES = ("single-pass", "reflect")
TARGET_RATIO = 3.0


def variant_name(mode: str, layout: str) -> str:
    return f"{'full' if mode == 'reflect' else 'single'}-{layout}"


def run_variant(mode: str, layout: str, args, out: Path) -> list[dict]:
    from reflect_sql.experiments.pipeline import PipelineFactory
    from reflect_sql.experiments.runner import run_eval
    from reflect_sql.experiments.scripted import oracle_lms

    config_path = out / f"{variant_name(mode, layout)}.yaml"
    config_path.write_text(json.dumps({
        "name": f"pipeline-speed-{variant_name(mode, layout)}",
        "dataset": {"format": "bird", "root": str(Path(args.root) / "bird"), "sample": args.questions, "seed": args.seed},
        "mode": mode, "threads": 1, "mlflow": {"enabled": False},
        "kb": {"enabled": True, "cache": str(out / "kb-cache")},
        "settings": {"lm": args.lm, "lm_cache": True, "prompt_layout": layout, "use_enrichment": False,
                     "cache_dir": str(out / "dspy-cache" / variant_name(mode, layout))},
    }))
    config = load_config(config_path, args.set_)
    run_dir = out / variant_name(mode, layout)
    lms = oracle_lms(config.dataset.load()) if args.oracle else None
    factory = PipelineFactory(config, run_dir, lms=lms)
    try:
        run_eval(config, run_dir, factory, progress=not args.json and sys.stderr.isatty())
    finally:
        factory.close()
    return [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines() if line.strip()]


def per_question(records: list[dict]) -> list[dict]:
    rows = []
    for r in records:
        cost = r.get("cost") or {}
        prompt, cached = int(cost.get("prompt_tokens") or 0), int(cost.get("cached_prompt_tokens") or 0)
        rows.append({"key": r.get("question_id"), "correct": bool(r.get("correct")), "lm_calls": cost.get("lm_calls"),
                     "prompt_computed": prompt - cached, "prompt_reused": cached,
                     "completion": int(cost.get("completion_tokens") or 0), "cache_hits": int(cost.get("cache_hits") or 0),
                     "seconds": cost.get("seconds")})
    return rows


def totals(rows: list[dict]) -> dict:
    n = len(rows) or 1
    mean = lambda key: round(sum(float(r[key] or 0) for r in rows) / n, 2)  # noqa: E731
    return {"questions": len(rows), "ex": round(100 * sum(r["correct"] for r in rows) / n, 2),
            **{f"{k}_per_question": mean(k) for k in ("lm_calls", "prompt_computed", "prompt_reused", "completion", "cache_hits", "seconds")}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", default=os.environ.get("REFLECT_SQL_BENCHMARKS", str(REPO.parent / "shared" / "benchmarks")),
                        help="the shared benchmarks folder (holding bird/)")
    parser.add_argument("--questions", type=int, default=10, help="seeded BIRD dev sample size (default 10)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lm", default="local/qwen2.5-coder-0.5b")
    add_set_arg(parser, "override a setting of every variant")
    add_out_arg(parser, "keep (and resume) the runs here (default: a temp dir, removed)")
    parser.add_argument("--layouts", nargs="+", choices=LAYOUTS, default=list(LAYOUTS),
                        help="the prompt layouts to compare (default: both)")
    parser.add_argument("--oracle", action="store_true", help="the zero-latency oracle LM instead of the model")
    add_json_arg(parser)
    args = parser.parse_args(argv)

    layouts = [lay for lay in LAYOUTS if lay in args.layouts]  # in LAYOUTS' order, each once
    with tempfile.TemporaryDirectory(prefix="pipeline-speed-") as tmp:
        out = Path(args.out) if args.out else Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        try:
            runs = {variant_name(m, lay): per_question(run_variant(m, lay, args, out)) for m in MODES for lay in layouts}
        except UserError as exc:
            print(f"pipeline_speed: {exc}", file=sys.stderr)
            return 2
    result: dict = {"lm": args.lm, "questions": args.questions, "seed": args.seed, "oracle": args.oracle,
                    "variants": {name: {"totals": totals(rows), "per_question": rows} for name, rows in runs.items()},
                    "layouts": {}}
    for layout in layouts:
        single, full = result["variants"][f"single-{layout}"]["totals"], result["variants"][f"full-{layout}"]["totals"]
        ratio = full["seconds_per_question"] / single["seconds_per_question"] if single["seconds_per_question"] else None
        result["layouts"][layout] = {
            "full_over_single_seconds": round(ratio, 2) if ratio is not None else None,
            "ratio_of_target": round(ratio / TARGET_RATIO, 2) if ratio is not None else None,
            "ex_full_minus_single": round(full["ex"] - single["ex"], 2),
        }
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"{'variant':<20}{'question':>10}{'calls':>6}{'hits':>5}{'computed':>10}{'reused':>9}{'compl':>7}{'s':>8}  ok")
    for name, v in result["variants"].items():
        for r in v["per_question"]:
            print(f"{name:<20}{str(r['key']):>10}{r['lm_calls']:>6}{r['cache_hits']:>5}{r['prompt_computed']:>10}{r['prompt_reused']:>9}"
                  f"{r['completion']:>7}{float(r['seconds'] or 0):>8.1f}  {'yes' if r['correct'] else 'no'}")
    for name, v in result["variants"].items():
        t = v["totals"]
        print(f"{name}: EX {t['ex']}%, per question {t['lm_calls_per_question']} calls ({t['cache_hits_per_question']} from "
              f"the cache), {t['prompt_computed_per_question']} "
              f"computed + {t['prompt_reused_per_question']} reused prompt tokens, {t['completion_per_question']} completion, "
              f"{t['seconds_per_question']} s")
    for layout, r in result["layouts"].items():
        print(f"{layout}: full = {r['full_over_single_seconds']}x single-pass seconds ({r['ratio_of_target']} of the "
              f"{TARGET_RATIO:g}x target); EX full - single = {r['ex_full_minus_single']:+}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
