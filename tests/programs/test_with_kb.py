"""The program on a real knowledge base (chroma + embeddings): retrieval through the KB and an
enrichment that lands as a new KB version with the verified example."""
import dspy
import pytest

from paper_settings import Settings

GOOD = "SELECT name, CAST(returns AS REAL) / orders AS return_rate FROM stores WHERE orders > 0"


@pytest.mark.slow
def test_verified_answer_enriches_a_real_kb_and_a_failed_one_does_not(db_path, engine, tmp_path, helpers):
    from reflect_sql.kb.build import build_kb
    from reflect_sql.kb.enrich import history
    from reflect_sql.kb.retrieve import Retriever
    from reflect_sql.programs import build_program
    from reflect_sql.programs.retriever import Enricher

    kb_dir = tmp_path / "kb"
    settings = Settings()
    build_kb(db_path, kb_dir, settings)
    before = len(history(kb_dir))
    retriever = Retriever(kb_dir, settings)
    assert isinstance(retriever, Enricher)  # the KB is what the program enriches, by protocol
    try:
        program = build_program(settings, engine, retriever)
        naive = "SELECT name, returns / orders AS return_rate FROM stores"
        with dspy.context(lm=helpers.ScriptedLM(helpers.Script(GenerateSQL={"sql": naive}))):
            failed = program(question="What is the return rate of each store?")
        assert failed.sql == naive and len(history(kb_dir)) == before  # a failed check teaches nothing

        with dspy.context(lm=helpers.ScriptedLM(helpers.Script(GenerateSQL={"sql": GOOD}))):
            pred = program(question="What is the return rate of each store?")
    finally:
        retriever.close()
    assert "stores" in pred.retrieved["tables"] and "stores.returns" in pred.retrieved["columns"]
    (step,) = [s for s in pred.trace if s["loop"] == "enrichment"]
    assert step["decision"] == "enriched", step
    log = history(kb_dir)
    assert len(log) == before + 1
    assert log[-1]["provenance"]["sql"] == GOOD
    assert log[-1]["provenance"]["question"] == "What is the return rate of each store?"
