"""The answer told in words: written only after entailment passed, kept only when every number it
states is in the result, else the table rendered plainly."""
import pytest

from reflect_sql.programs.answer_sentence import AnswerSentence, render_table
from reflect_sql.programs.number_check import numbers_in_text, unsupported_numbers
from paper_settings import Settings

GOOD = "SELECT name, CAST(returns AS REAL) / orders AS return_rate FROM stores WHERE orders > 0"
QUESTION = "What is the return rate of each store?"


def _told(run, helpers, sentence, question=QUESTION, **script):
    pred, _ = run(helpers.Script(GenerateSQL={"sql": GOOD}, **script), question=question)
    lm = helpers.ScriptedLM(helpers.Script(WriteAnswer={"answer": sentence}))
    return AnswerSentence(Settings(), lm)(question=question, prediction=pred), lm


def test_a_sentence_whose_numbers_are_in_the_result_is_kept(run, helpers):
    pred, lm = _told(run, helpers, "North returns 30% of its orders, East 0.25 of them.")
    assert pred.answer == "North returns 30% of its orders, East 0.25 of them." and pred.answer_source == "model"
    (step,) = [s for s in pred.trace if s["loop"] == "answer"]
    assert step["decision"].startswith("sentence kept") and step["cost"]["lm_calls"] == 1
    # The writer saw the question, the SQL and the result preview with its rows.
    (inputs,) = helpers.inputs_of(lm, "WriteAnswer")
    assert inputs["question"] == QUESTION and inputs["sql"] == GOOD and "'North' | 0.3" in inputs["result_preview"]


def test_a_sentence_with_a_number_not_in_the_result_falls_back_to_the_table(run, helpers):
    pred, _ = _told(run, helpers, "North returns 42% of its orders.")
    assert pred.answer_source == "table"
    assert pred.answer == "2 rows: name North; return_rate 0.3 | name East; return_rate 0.25."
    (step,) = [s for s in pred.trace if s["loop"] == "answer"]
    assert "42%" in step["failure"] and step["inputs"]["refused_sentence"] == "North returns 42% of its orders."
    assert step["decision"].startswith("fallback")


def test_the_sentence_costs_its_call_in_the_question_cost(run, helpers):
    pred, _ = run(helpers.Script(GenerateSQL={"sql": GOOD}))
    before = dict(pred.cost)
    told = AnswerSentence(Settings(), helpers.ScriptedLM(helpers.Script(WriteAnswer={"answer": "East 25%."})))(
        question=QUESTION, prediction=pred)
    assert told.cost["lm_calls"] == before["lm_calls"] + 1
    assert told.cost["completion_tokens"] > before["completion_tokens"]


def test_no_sentence_is_written_when_entailment_did_not_pass(run, helpers):
    pred, _ = run(helpers.Script(GenerateSQL={"sql": GOOD}, EntailmentJudge=helpers.entailment(1, 1, "wrong")))
    lm = helpers.ScriptedLM(helpers.Script(WriteAnswer={"answer": "North 30%."}))
    told = AnswerSentence(Settings(), lm)(question=QUESTION, prediction=pred)
    assert told.answer is None and told.answer_source is None
    assert lm.calls == []  # the writer was never asked
    assert [s for s in told.trace if s["loop"] == "answer"][0]["decision"].startswith("no sentence")


def test_a_failing_writer_falls_back_and_keeps_the_answer(run, helpers):
    pred, _ = run(helpers.Script(GenerateSQL={"sql": GOOD}))
    lm = helpers.ScriptedLM(helpers.Script())  # no reply for WriteAnswer: the script raises
    told = AnswerSentence(Settings(), lm)(question=QUESTION, prediction=pred)
    assert told.answer_source == "table" and "North" in told.answer and told.sql == GOOD
    assert "answer writer failed" in [s for s in told.trace if s["loop"] == "answer"][0]["failure"]


@pytest.mark.parametrize("sentence, rows, question, unbacked", [
    ("Bàn số 4 đang đợi món Lẩu Thái 32 phút (quá ngưỡng 20p)", [("Bàn 4", "Lẩu Thái", 32)],
     "Bàn nào đợi món quá 20 phút?", []),                              # the question's own threshold
    ("Bàn số 4 đang đợi món Lẩu Thái 35 phút", [("Bàn 4", "Lẩu Thái", 32)], "Bàn nào đợi món?", ["35"]),
    ("Revenue was 12,500,000 VND.", [(12500000,)], "", []),              # English thousands
    ("Doanh thu là 12.500.000 đồng.", [(12500000.0,)], "", []),          # Vietnamese thousands
    ("The rate is 33.3%.", [(0.33333,)], "", []),                       # a ratio as a rounded percentage
    ("The rate is 33.3.", [(0.33333,)], "", ["33.3"]),                  # ... but not without the % sign
    ("Table 5 waited 37.5 minutes.", [(37.46,)], "How long has table 5 waited?", []),
    ("3 dishes: Phở, Bún chả and Gỏi cuốn.", [("Phở",), ("Bún chả",), ("Gỏi cuốn",)], "", []),  # the row count
    ("Opened on 2025-06-17 at 19:30.", [("2025-06-17 19:30:00",)], "", []),  # numbers inside a text cell
    ("About 7 orders.", [(3,), (4,)], "", ["7"]),                        # a sum the model computed
])
def test_number_check(sentence, rows, question, unbacked):
    assert unsupported_numbers(sentence, ["c"] * len(rows[0]), rows, question) == unbacked


def test_numbers_are_read_as_written():
    assert numbers_in_text("Bàn 4, 32 phút, 12.500.000 đ, 25 %, -3") == ["4", "32", "12.500.000", "25%", "-3"]


def test_render_table_shapes():
    assert render_table(["n"], [(5,)]) == "n: 5."
    assert render_table(["a"], []) == "No rows match."
    assert render_table(["a"], [(i,) for i in range(7)]).endswith("a 4 … and 2 more.")
