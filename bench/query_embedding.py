"""Time and fidelity of a question's embedding in bfloat16 against float32 (setting
``query_embedding_precision``).

Retrieval embeds one question (with its evidence) per call; on this CPU that single forward pass
of MiniLM is most of retrieval's latency. The questions are the shared BIRD and Spider dev
questions as retrieval asks them (BIRD's with their evidence). The two precisions are timed
alternately, question by question, so that machine load falls on both alike.

Printed: median and mean milliseconds per question for each precision, their ratio
(bfloat16 / float32; below 1 is faster), and the lowest and mean cosine between the two vectors of
a question.

``--threads A B`` compares instead two torch thread counts for a bfloat16 question (setting
``query_embedding_threads``), alternated the same way, and prints the ratio A / B. The process runs
as every reflect-sql process does, with ``OMP_WAIT_POLICY=PASSIVE`` (set on import of reflect_sql
for the embedded LM), under which waking a second thread for each small operation costs time.

Run: ``python bench/query_embedding.py --json [--limit N] [--threads 1 2]``
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
from reflect_sql.kb.embedding import embed_query  # noqa: E402

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "benchmarks"
PRECISIONS = ("float32", "bfloat16")


def question_texts(root: Path, limit: int | None) -> list[str]:
    texts = []
    for dataset in ("bird", "spider"):
        questions = load_dataset(dataset, root / dataset)[:limit]
        texts += [" ".join(part for part in (q.question, q.evidence) if part) for q in questions]
    return texts


def measure(texts: list[str]) -> dict:
    for precision in PRECISIONS:  # load both models and warm their kernels before timing
        embed_query(texts[0], precision)
    millis: dict[str, list[float]] = {p: [] for p in PRECISIONS}
    cosines = []
    for text in texts:
        vectors = {}
        for precision in PRECISIONS:
            started = time.perf_counter()
            vectors[precision] = embed_query(text, precision)
            millis[precision].append((time.perf_counter() - started) * 1000)
        cosines.append(float(vectors["float32"] @ vectors["bfloat16"]))
    medians = {p: statistics.median(ms) for p, ms in millis.items()}
    return {
        "questions": len(texts),
        "ms": {p: {"median": round(medians[p], 2), "mean": round(statistics.fmean(ms), 2)} for p, ms in millis.items()},
        "ratio_bfloat16_to_float32": round(medians["bfloat16"] / medians["float32"], 3),
        "cosine": {"min": round(min(cosines), 6), "mean": round(statistics.fmean(cosines), 6)},
        "load_average": round(os.getloadavg()[0], 2),
    }


def measure_threads(texts: list[str], counts: tuple[int, int]) -> dict:
    for threads in counts:
        embed_query(texts[0], "bfloat16", threads)
    millis: dict[int, list[float]] = {n: [] for n in counts}
    for i, text in enumerate(texts):
        for threads in (counts if i % 2 == 0 else counts[::-1]):  # neither count always goes first
            started = time.perf_counter()
            embed_query(text, "bfloat16", threads)
            millis[threads].append((time.perf_counter() - started) * 1000)
    medians = {n: statistics.median(ms) for n, ms in millis.items()}
    first, second = counts
    return {
        "questions": len(texts),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", ""),
        "threads_ms": {str(n): {"median": round(medians[n], 2), "mean": round(statistics.fmean(ms), 2)}
                       for n, ms in millis.items()},
        f"ratio_{first}_to_{second}_threads": round(medians[first] / medians[second], 3),
        "load_average": round(os.getloadavg()[0], 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=SHARED, help="folder holding bird/ and spider/")
    parser.add_argument("--limit", type=int, help="questions per dataset (default: all)")
    parser.add_argument("--threads", type=int, nargs=2, metavar=("A", "B"),
                        help="compare two torch thread counts (bfloat16) instead of the precisions")
    parser.add_argument("--json", action="store_true", help="print JSON only")
    args = parser.parse_args(argv)
    if args.threads and (min(args.threads) < 1 or args.threads[0] == args.threads[1]):
        print("query_embedding: error: --threads takes two different counts of at least 1", file=sys.stderr)
        return 2
    if args.limit is not None and args.limit < 1:
        print("query_embedding: error: --limit must be at least 1", file=sys.stderr)
        return 2
    if not (args.root / "bird").is_dir() or not (args.root / "spider").is_dir():
        print(f"query_embedding: error: {args.root} holds no bird/ and spider/ folders", file=sys.stderr)
        return 2
    texts = question_texts(args.root, args.limit)
    result = measure_threads(texts, tuple(args.threads)) if args.threads else measure(texts)
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    if args.threads:
        print(f"{result['questions']} questions (bfloat16), OMP_WAIT_POLICY={result['omp_wait_policy'] or 'unset'}, "
              f"load average {result['load_average']}")
        for n, ms in result["threads_ms"].items():
            print(f"  {n} thread(s): median {ms['median']} ms, mean {ms['mean']} ms")
        key = next(k for k in result if k.startswith("ratio_"))
        print(f"  {key}: {result[key]}")
        return 0
    ms = result["ms"]
    print(f"{result['questions']} questions, load average {result['load_average']}")
    for precision in PRECISIONS:
        print(f"  {precision:8s} median {ms[precision]['median']} ms, mean {ms[precision]['mean']} ms")
    print(f"  bfloat16 / float32: {result['ratio_bfloat16_to_float32']}  cosine min {result['cosine']['min']} "
          f"mean {result['cosine']['mean']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
