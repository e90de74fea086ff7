"""Speed of the embedded LMs: prompt and generation tokens/s, and what the shared-prefix KV cache saves.

For each model: a cold call with a long stable prefix (instructions + schema, as the pipeline's
prompts have) and a short question, then a second call with the same prefix and another question.
The speed-up is the cold call's prompt-processing time over the warm call's. A last pair checks
that the prefix survives a call with a different prefix (generator and judges alternate). Numbers come from
llama.cpp's own timings. Run: ``python bench/lm_speed.py [--models ...] [--json]``.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

from reflect_sql.lm.local_engine import LocalEngine
from reflect_sql.lm.models import MODELS, ensure_model
from reflect_sql.settings import load_settings

SCHEMA = "\n".join(
    f"CREATE TABLE {t} (id INTEGER PRIMARY KEY, name TEXT, {t}_code TEXT, created_at DATE, amount REAL, "
    f"status TEXT, {t}_owner_id INTEGER REFERENCES staff(id), notes TEXT);"
    for t in ("restaurants", "menus", "dishes", "ingredients", "suppliers", "orders", "order_items",
              "customers", "staff", "shifts", "reservations", "reviews", "payments", "deliveries")
)
PREFIX = (
    "You are an expert SQLite analyst. Answer with one SQL query that runs on the schema below. "
    "Use only tables and columns that exist; join on declared keys; prefer explicit JOIN syntax; "
    "do not invent values; return exactly the columns the question asks for.\n\nSchema:\n" + SCHEMA
)
# A judge prompt with a different stable head, as the pipeline alternates generator and judges.
OTHER_PREFIX = (
    "You are a strict reviewer of SQL queries. Score how well the query answers the question from 1 to 10 "
    "and explain the main flaw. Check joins, grouping, filters and the selected columns.\n\nSchema:\n" + SCHEMA
)
QUESTIONS = ("How many orders were paid by each customer?", "Which dishes have no reviews?",
             "What is the average payment amount per restaurant?")


def _call(engine: LocalEngine, question: str, max_tokens: int, ignore_eos: bool,
          prefix: str = PREFIX) -> tuple[dict, float]:
    body = {
        "messages": [{"role": "system", "content": prefix}, {"role": "user", "content": question}],
        "max_tokens": max_tokens,
        "temperature": 0.0,
        # A fixed number of generated tokens makes generation speed comparable between runs.
        "ignore_eos": ignore_eos,
    }
    started = time.perf_counter()
    reply = engine.chat(body)
    if "error" in reply:
        raise RuntimeError(f"llama.cpp error: {reply['error']}")
    return reply, time.perf_counter() - started


def measure(name: str, settings, max_tokens: int) -> dict:
    started = time.perf_counter()
    ensure_model(name, settings.model_dir)
    engine = LocalEngine(name, model_dir=settings.model_dir, n_ctx=settings.lm_context_tokens,
                         threads=settings.lm_threads)
    engine._loaded()
    load_s = time.perf_counter() - started
    cold, cold_s = _call(engine, QUESTIONS[0], max_tokens, ignore_eos=True)
    warm, warm_s = _call(engine, QUESTIONS[1], max_tokens, ignore_eos=True)
    _call(engine, QUESTIONS[0], 1, ignore_eos=False, prefix=OTHER_PREFIX)
    back, _ = _call(engine, QUESTIONS[2], 1, ignore_eos=False)
    ct, wt, bt = cold["timings"], warm["timings"], back["timings"]
    return {
        "model": name,
        "load_seconds": round(load_s, 2),
        "prompt_tokens": cold["usage"]["prompt_tokens"],
        "prompt_tokens_per_s": round(ct["prompt_per_second"], 1),
        "generation_tokens_per_s": round((ct["predicted_per_second"] + wt["predicted_per_second"]) / 2, 1),
        "generated_tokens": ct["predicted_n"],
        "cold_prompt_seconds": round(ct["prompt_ms"] / 1000, 3),
        "warm_prompt_seconds": round(wt["prompt_ms"] / 1000, 3),
        "warm_cached_tokens": wt.get("cache_n", 0),
        "prefix_cache_prompt_speedup": round(ct["prompt_ms"] / max(wt["prompt_ms"], 1e-6), 1),
        "cold_call_seconds": round(cold_s, 2),
        "warm_call_seconds": round(warm_s, 2),
        "call_speedup": round(cold_s / warm_s, 2),
        # After a prompt with another head, llama.cpp restores this prefix from its RAM prompt cache.
        "after_switch_cached_tokens": bt.get("cache_n", 0),
        "after_switch_prompt_seconds": round(bt["prompt_ms"] / 1000, 3),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", choices=sorted(MODELS), default=sorted(MODELS))
    parser.add_argument("--max-tokens", type=int, default=48, help="tokens generated per call")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    args = parser.parse_args(argv)
    settings = load_settings()
    results = [measure(name, settings, args.max_tokens) for name in args.models]
    if args.json:
        json.dump({"threads": settings.lm_threads, "n_ctx": settings.lm_context_tokens, "results": results},
                  sys.stdout, indent=2)
        print()
        return 0
    for r in results:
        print(f"{r['model']}: load {r['load_seconds']}s")
        print(f"  prompt      {r['prompt_tokens_per_s']:7.1f} tok/s  ({r['prompt_tokens']} prompt tokens)")
        print(f"  generation  {r['generation_tokens_per_s']:7.1f} tok/s  ({r['generated_tokens']} tokens per call)")
        print(f"  shared prefix: cold prompt {r['cold_prompt_seconds']}s -> warm {r['warm_prompt_seconds']}s "
              f"({r['warm_cached_tokens']} tokens reused): {r['prefix_cache_prompt_speedup']}x on the prompt, "
              f"{r['call_speedup']}x on the whole call ({r['cold_call_seconds']}s -> {r['warm_call_seconds']}s)")
        print(f"  after a prompt with another prefix: {r['after_switch_cached_tokens']} tokens restored, "
              f"prompt {r['after_switch_prompt_seconds']}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
