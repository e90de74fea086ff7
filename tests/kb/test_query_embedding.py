"""A question's embedding in bfloat16 (``query_embedding_precision``): the same direction as in
float32, documents untouched, and the retriever asks in the precision its settings name."""
from __future__ import annotations

import numpy as np
import pytest

from reflect_sql.kb import embedding
from reflect_sql.kb.build import build_kb
from reflect_sql.kb.retrieve import Retriever
from reflect_sql.settings import Settings, SettingsError

@pytest.fixture(autouse=True)
def eager_question_model(monkeypatch):
    """Each test starts with the eager bfloat16 model: a warmed retriever elsewhere in the session
    freezes it for the whole process."""
    monkeypatch.setattr(embedding, "_frozen_query_model", None)
    monkeypatch.setattr(embedding, "_freeze_failure", None)


QUESTIONS = [
    "Which students take thermodynamics?",
    "What is the average grade of the students from Warsaw in courses worth more than 4 credits?",
    "Trà sữa nướng giá bao nhiêu?",
    "How many superheroes have blue eyes? blue eyes refers to colour = 'Blue' where eye_colour_id = colour.id",
]


def test_a_bfloat16_question_vector_points_where_the_float32_one_does():
    for question in QUESTIONS:
        exact = embedding.embed([question])[0]
        quick = embedding.embed_query(question, "bfloat16")
        assert quick.dtype == np.float32 and quick.shape == exact.shape
        assert abs(float(np.linalg.norm(quick)) - 1.0) < 1e-5  # pooled and normalized in float32
        assert float(quick @ exact) > 0.9999
        assert not np.array_equal(quick, exact)  # it did run in bfloat16


def test_float32_is_the_documents_own_embedding():
    for question in QUESTIONS:
        assert np.array_equal(embedding.embed_query(question, "float32"), embedding.embed([question])[0])


def test_the_bfloat16_model_leaves_the_document_embedder_in_float32():
    embedding.embed_query(QUESTIONS[0], "bfloat16")
    model = embedding.load_model()
    assert {p.dtype for p in model.parameters()} == {__import__("torch").float32}


@pytest.mark.parametrize("precision", ["bfloat16", "float32"])
def test_the_retriever_asks_in_the_precision_its_settings_name(school_db, tmp_path, monkeypatch, precision):
    settings = Settings(context_budget_tokens=0, query_embedding_precision=precision, query_embedding_threads=3)
    build_kb(str(school_db), tmp_path / "kb", settings)
    asked = []
    real = embedding.embed_query
    monkeypatch.setattr(embedding, "embed_query",
                        lambda text, p="float32", threads=0: asked.append((p, threads)) or real(text, p, threads))
    retriever = Retriever(tmp_path / "kb", settings)
    try:
        context = retriever.retrieve("Which students take thermodynamics?")
    finally:
        retriever.close()
    assert asked and set(asked) == {(precision, 3)}
    assert {"student", "course"} <= set(context.tables)


def _counting_thread_switches(monkeypatch):
    import torch

    seen = []
    real = torch.set_num_threads
    monkeypatch.setattr(torch, "set_num_threads", lambda n: seen.append(n) or real(n))
    return seen


def test_a_question_embedded_on_one_thread_leaves_torch_its_own_count(monkeypatch):
    import torch

    before = torch.get_num_threads()
    if before < 2:
        pytest.skip("torch runs on one thread here: there is nothing to switch")
    seen = _counting_thread_switches(monkeypatch)
    one = embedding.embed_query(QUESTIONS[1], "bfloat16", 1)
    assert seen == [1, before] and torch.get_num_threads() == before
    assert float(one @ embedding.embed_query(QUESTIONS[1], "bfloat16")) > 0.99999
    embedding.embed_query(QUESTIONS[1], "bfloat16", 0)  # 0 keeps torch's count: nothing is switched
    assert seen == [1, before]


def test_the_thread_count_comes_back_when_the_embedding_fails(monkeypatch):
    import torch

    before = torch.get_num_threads()
    if before < 2:
        pytest.skip("torch runs on one thread here: there is nothing to switch")

    def broken(text, precision):
        assert torch.get_num_threads() == 1
        raise RuntimeError("model file gone")

    monkeypatch.setattr(embedding, "_embed_query", broken)
    with pytest.raises(RuntimeError, match="model file gone"):
        embedding.embed_query(QUESTIONS[0], "bfloat16", 1)
    assert torch.get_num_threads() == before


def test_an_unknown_precision_is_refused():
    with pytest.raises((SettingsError, ValueError)):
        Settings(query_embedding_precision="float16")


def _bench(*args: str):
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "bench" / "query_embedding.py"
    return subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=300)


def test_the_bench_times_both_precisions_on_the_shared_questions(benchmarks_dir):
    import json

    proc = _bench("--json", "--limit", "4", "--root", str(benchmarks_dir))
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["questions"] == 8  # 4 BIRD and 4 Spider
    assert set(result["ms"]) == {"float32", "bfloat16"} and all(v["median"] > 0 for v in result["ms"].values())
    # The ratio is of the unrounded medians; the printed ones are rounded to 0.01 ms.
    assert result["ratio_bfloat16_to_float32"] == pytest.approx(
        result["ms"]["bfloat16"]["median"] / result["ms"]["float32"]["median"], rel=0.01)
    assert 0.9999 < result["cosine"]["min"] <= result["cosine"]["mean"] <= 1.00001


def test_the_bench_refuses_a_root_without_the_benchmarks(tmp_path):
    proc = _bench("--root", str(tmp_path))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "bird/" in proc.stderr


def test_the_bench_compares_thread_counts(benchmarks_dir):
    import json

    proc = _bench("--json", "--limit", "2", "--threads", "1", "2", "--root", str(benchmarks_dir))
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["questions"] == 4 and set(result["threads_ms"]) == {"1", "2"}
    assert result["omp_wait_policy"] == "PASSIVE"  # as in every reflect-sql process
    assert result["ratio_1_to_2_threads"] == pytest.approx(
        result["threads_ms"]["1"]["median"] / result["threads_ms"]["2"]["median"], rel=0.02)


def test_the_bench_refuses_equal_thread_counts(benchmarks_dir):
    proc = _bench("--threads", "2", "2", "--root", str(benchmarks_dir))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "--threads" in proc.stderr


def test_a_frozen_question_model_gives_the_eager_vectors(monkeypatch):
    texts = ["Why?", *QUESTIONS, " ".join(QUESTIONS * 12)]  # from one word to past the model's 256 tokens
    eager = [embedding.embed_query(t, "bfloat16") for t in texts]
    assert embedding.freeze_query_embedder() is True
    frozen_model = embedding._frozen_query_model
    assert embedding.freeze_query_embedder() is True and embedding._frozen_query_model is frozen_model  # once
    transformer = embedding._bfloat16_transformer()
    # The eager transformer is no longer asked: every vector below comes from the frozen graph.
    monkeypatch.setattr(transformer, "forward", lambda *a, **k: pytest.fail("the eager model ran"))
    for text, before in zip(texts, eager):
        frozen = embedding.embed_query(text, "bfloat16")
        assert frozen.shape == before.shape and float(frozen @ before) > 0.99999
    assert np.array_equal(embedding.embed_query(QUESTIONS[0], "float32"), embedding.embed([QUESTIONS[0]])[0])


def _counting_traces(monkeypatch, trace):
    import torch

    traced = []
    monkeypatch.setattr(torch.jit, "trace", lambda *a, **k: traced.append(1) or trace(*a, **k))
    return traced


def test_a_trace_that_disagrees_with_the_eager_model_is_dropped_once(monkeypatch, caplog):
    import torch

    real = torch.jit.freeze
    # A trace that baked in its example's length: here, it reads only the first token of any text.
    monkeypatch.setattr(torch.jit, "freeze", lambda module: (lambda frozen: lambda *inputs: frozen(
        *(x[:, :1] for x in inputs)))(real(module)))
    traced = _counting_traces(monkeypatch, torch.jit.trace)
    assert embedding.freeze_query_embedder() is False
    assert embedding._frozen_query_model is None and "not the eager model's" in caplog.text
    assert embedding.freeze_query_embedder() is False and traced == [1]  # not traced again
    vector = embedding.embed_query(QUESTIONS[1], "bfloat16")
    assert float(vector @ embedding.embed([QUESTIONS[1]])[0]) > 0.9999


def test_a_trace_that_fails_leaves_the_eager_model(monkeypatch, caplog):
    def broken(*args, **kwargs):
        raise RuntimeError("no tracing here")

    _counting_traces(monkeypatch, broken)
    assert embedding.freeze_query_embedder() is False
    assert caplog.text.count("no tracing here") == 1
    assert float(embedding.embed_query(QUESTIONS[0], "bfloat16") @ embedding.embed([QUESTIONS[0]])[0]) > 0.9999


@pytest.mark.parametrize("precision", ["bfloat16", "float32"])
def test_warming_a_retriever_freezes_the_bfloat16_question_model_only(school_db, tmp_path, precision):
    settings = Settings(context_budget_tokens=0, query_embedding_precision=precision)
    build_kb(str(school_db), tmp_path / "kb", settings)
    retriever = Retriever(tmp_path / "kb", settings)
    try:
        retriever.warm()
        assert embedding.frozen_in_use() == (precision == "bfloat16")
        assert {"student", "course"} <= set(retriever.retrieve("Which students take thermodynamics?").tables)
    finally:
        retriever.close()
