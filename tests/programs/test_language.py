"""The question's language: detected without an LM, rendered in English only when it is not English,
and both texts searched by the KB with their hits merged."""
import json

import dspy
import pytest

from reflect_sql.experiments import smartrestaurant
from reflect_sql.programs.language import ENGLISH, OTHER, VIETNAMESE, detect_language


@pytest.mark.parametrize("text, language", [
    ("How many orders were cancelled in May 2025?", ENGLISH),
    # Vietnamese dish names inside an English question leave it English.
    ("How many orders this month included both Lẩu Thái and Trà sữa nướng?", ENGLISH),
    ("List down Ajax's superpowers.", ENGLISH),
    ("Có bao nhiêu đơn hàng bị hủy trong tháng 5 năm 2025?", VIETNAMESE),
    ("Bàn 5 đã chờ món khai vị bao nhiêu phút rồi?", VIETNAMESE),
    ("Сколько заказов отменено?", OTHER),
    ("有多少订单被取消", OTHER),
    ("", ENGLISH),
    ("  42 ? ", ENGLISH),
])
def test_language_is_told_by_letters_and_function_words(text, language):
    assert detect_language(text) == language


def test_every_restaurant_question_is_told_its_own_language():
    entries = json.loads(smartrestaurant.QUESTIONS.read_text(encoding="utf-8"))
    wrong = [(e["lang"], e["question"]) for e in entries if detect_language(e["question"]) != e["lang"]]
    assert not wrong
    assert {e["lang"] for e in entries} == {ENGLISH, VIETNAMESE}


class RenderingRetriever:
    """Wraps the recording retriever to accept ``renderings`` and remember them."""

    def __init__(self, inner):
        self.inner = inner
        self.renderings: list[tuple] = []

    def retrieve(self, question, k, m, evidence="", renderings=()):
        self.renderings.append(tuple(renderings))
        return self.inner.retrieve(question, k, m, evidence)


SQL = "SELECT COUNT(*) FROM stores"


@pytest.mark.parametrize("mode", ["reflect", "single-pass"])
def test_an_english_question_makes_no_rendering_call(engine, retriever, helpers, mode):
    from reflect_sql.programs import build_program
    from reflect_sql.lm.adapters import make_adapter

    settings = helpers.Settings()
    wrapped = RenderingRetriever(retriever)
    lm = helpers.ScriptedLM(helpers.Script(GenerateSQL={"sql": SQL}))
    with dspy.context(lm=lm, adapter=make_adapter(settings)):
        pred = build_program(settings, engine, wrapped, mode=mode)(question="How many stores are there?")
    assert "RenderQuestion" not in helpers.calls_by_signature(lm)
    assert wrapped.renderings and set(wrapped.renderings) == {()}
    assert not [s for s in pred.trace if s["loop"] == "retrieval.render"]


@pytest.mark.parametrize("mode", ["reflect", "single-pass"])
def test_a_vietnamese_question_is_rendered_once_and_retrieved_with_its_rendering(engine, retriever, helpers, mode):
    from reflect_sql.programs import build_program
    from reflect_sql.lm.adapters import make_adapter

    settings = helpers.Settings()
    wrapped = RenderingRetriever(retriever)
    script = helpers.Script(GenerateSQL={"sql": SQL}, RenderQuestion={"english_question": "How many stores are there?"})
    lm = helpers.ScriptedLM(script)
    question = "Có bao nhiêu cửa hàng?"
    with dspy.context(lm=lm, adapter=make_adapter(settings)):
        pred = build_program(settings, engine, wrapped, mode=mode)(question=question)
    calls = helpers.calls_by_signature(lm)
    assert calls["RenderQuestion"] == 1
    (rendering_inputs,) = helpers.inputs_of(lm, "RenderQuestion")
    assert rendering_inputs["question"] == question and rendering_inputs["language"] == "Vietnamese"
    assert set(wrapped.renderings) == {("How many stores are there?",)}
    (step,) = [s for s in pred.trace if s["loop"] == "retrieval.render"]
    assert step["rewrite"] == {"english": "How many stores are there?"}
    assert step["cost"]["lm_calls"] == 1
    # The generator still reads the question as it was asked.
    assert all(i["question"] == question for i in helpers.inputs_of(lm, "GenerateSQL"))


def test_rendering_off_retrieves_with_the_question_alone(engine, retriever, helpers):
    from reflect_sql.programs import build_program
    from reflect_sql.lm.adapters import make_adapter

    settings = helpers.Settings(render_questions=False)
    wrapped = RenderingRetriever(retriever)
    lm = helpers.ScriptedLM(helpers.Script(GenerateSQL={"sql": SQL}))
    with dspy.context(lm=lm, adapter=make_adapter(settings)):
        build_program(settings, engine, wrapped, mode="single-pass")(question="Có bao nhiêu cửa hàng?")
    assert "RenderQuestion" not in helpers.calls_by_signature(lm)
    assert set(wrapped.renderings) == {()}


def test_a_failed_rendering_retrieves_with_the_question_alone(engine, retriever, helpers):
    from reflect_sql.programs import build_program
    from reflect_sql.lm.adapters import make_adapter

    settings = helpers.Settings()
    wrapped = RenderingRetriever(retriever)
    lm = helpers.ScriptedLM(helpers.Script(GenerateSQL={"sql": SQL}, RenderQuestion={"english_question": "  "}))
    with dspy.context(lm=lm, adapter=make_adapter(settings)):
        pred = build_program(settings, engine, wrapped, mode="single-pass")(question="Có bao nhiêu cửa hàng?")
    assert set(wrapped.renderings) == {()}
    (step,) = [s for s in pred.trace if s["loop"] == "retrieval.render"]
    assert step["failure"] and pred.sql == SQL


def test_the_rendering_is_told_the_glossary_words_the_question_uses(engine, retriever, helpers):
    from reflect_sql.programs import build_program
    from reflect_sql.lm.adapters import make_adapter

    class WithGlossary(RenderingRetriever):
        def glossary_in(self, text):
            return {"cửa hàng": "a store (stores)"} if "cửa hàng" in text else {}

    settings = helpers.Settings()
    wrapped = WithGlossary(retriever)
    script = helpers.Script(GenerateSQL={"sql": SQL}, RenderQuestion={"english_question": "How many stores are there?"})
    lm = helpers.ScriptedLM(script)
    with dspy.context(lm=lm, adapter=make_adapter(settings)):
        pred = build_program(settings, engine, wrapped, mode="single-pass")(question="Có bao nhiêu cửa hàng?")
    (inputs,) = helpers.inputs_of(lm, "RenderQuestion")
    assert inputs["glossary"] == "cửa hàng: a store (stores)"
    (step,) = [s for s in pred.trace if s["loop"] == "retrieval.render"]
    assert step["inputs"]["glossary"] == ["cửa hàng"]


def test_no_rendering_when_retrieval_passes_the_whole_database(engine, retriever, helpers):
    """The KB-less retriever (and a KB whose database fits the budget) passes every table whatever
    the question says: rendering it could change nothing, so no call is made."""
    from reflect_sql.programs import build_program
    from reflect_sql.lm.adapters import make_adapter

    settings = helpers.Settings()
    lm = helpers.ScriptedLM(helpers.Script(GenerateSQL={"sql": SQL}))
    with dspy.context(lm=lm, adapter=make_adapter(settings)):
        pred = build_program(settings, engine, retriever, mode="single-pass")(question="Có bao nhiêu cửa hàng?")
    assert "RenderQuestion" not in helpers.calls_by_signature(lm)
    (step,) = [s for s in pred.trace if s["loop"] == "retrieval.render"]
    assert step["decision"] == "skipped: retrieval passes the whole database"
