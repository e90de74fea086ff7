"""Time and fidelity of a question's embedding in bfloat16 against float32 (setting
``query_embedding_precision``).

Retrieval embeds one question (with its evidence) per call; on this CPU that single forward pass
of MiniLM is most of retrieval's latency. The questions are the shared BIRD and Spider dev
questions as retrieval asks them (BIRD's with their evidence). The two precisions are timed
alternately, question by question, so that machine load falls on both alike.

Printed: median and mean milliseconds per question for each precision, their ratio
(bfloat16 / float32; below 1 is faster), and the lowest and mean cosine between the two vectors of
a question.

Run: ``python bench/query_embedding.py --json [--limit N]``
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=SHARED, help="folder holding bird/ and spider/")
    parser.add_argument("--limit", type=int, help="questions per dataset (default: all)")
    parser.add_argument("--json", action="store_true", help="print JSON only")
    args = parser.parse_args(argv)
    if args.limit is not None and args.limit < 1:
        print("query_embedding: error: --limit must be at least 1", file=sys.stderr)
        return 2
    if not (args.root / "bird").is_dir() or not (args.root / "spider").is_dir():
        print(f"query_embedding: error: {args.root} holds no bird/ and spider/ folders", file=sys.stderr)
        return 2
    result = measure(question_texts(args.root, args.limit))
    if args.json:
        print(json.dumps(result, indent=1))
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
