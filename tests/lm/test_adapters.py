"""The shared-head prompt layout: every per-question call opens with the same bytes."""
from __future__ import annotations

import textwrap

import dspy
import pytest

from reflect_sql.lm.adapters import (
    BoundedJSONAdapter,
    HEAD_FIELDS,
    CountingChatAdapter,
    SharedHeadChatAdapter,
    SharedHeadJSONAdapter,
    bounds,
    make_adapter,
    other_adapter,
    parse_head,
    render_head,
)
from reflect_sql.lm.scripted import ScriptedLM
from reflect_sql.settings import Settings
from reflect_sql.signatures.column_describer import ColumnDescriber
from reflect_sql.signatures.entailment_judge import EntailmentJudge
from reflect_sql.signatures.retrieval_judge import RetrievalJudge
from reflect_sql.signatures.semantic_judge import SemanticJudge
from reflect_sql.signatures.sql_generator import GenerateSQL
from reflect_sql.signatures.syntax_repairer import RepairSQL

class SchemaLM(ScriptedLM):
    supports_response_schema = True  # as the embedded engine: replies constrained to a JSON schema


PER_QUESTION = (GenerateSQL, RepairSQL, RetrievalJudge, SemanticJudge, EntailmentJudge)
HEAD = {"question": "How many stores are in the North?", "evidence": "North is a region name.",
        "schema_context": 'CREATE TABLE stores (id INTEGER, "region id" INTEGER);\n-- 12 rows'}


def inputs_for(signature) -> dict:
    return {name: HEAD.get(name, f"<{name} of {signature.__name__}>") for name in signature.input_fields}


def prompt_text(messages) -> str:
    return "".join(m["content"] for m in messages)


@pytest.mark.parametrize("adapter", [SharedHeadChatAdapter(), SharedHeadJSONAdapter()], ids=["chat", "json"])
def test_every_per_question_signature_opens_with_the_same_head(adapter):
    assert all(set(HEAD_FIELDS) <= set(sig.input_fields) for sig in PER_QUESTION)
    head = render_head(HEAD)
    texts = {sig.__name__: prompt_text(adapter.format(sig, [], inputs_for(sig))) for sig in PER_QUESTION}
    for name, text in texts.items():
        assert text.startswith(head), name
        # The long schema context is sent once; the short fields again where the task is asked.
        assert text.count(HEAD["schema_context"]) == 1, name
        for field in ("question", "evidence"):
            assert text.count(HEAD[field]) == 2, (name, field)
    # After the head, the roles differ: their own instructions and inputs follow.
    tails = {text[len(head):] for text in texts.values()}
    assert len(tails) == len(PER_QUESTION)


def test_the_head_does_not_depend_on_demos_or_the_other_inputs():
    adapter = SharedHeadChatAdapter()
    demo = {**inputs_for(GenerateSQL), "question": "Another question", "sql": "SELECT 1"}
    plain = adapter.format(GenerateSQL, [], inputs_for(GenerateSQL))
    with_demo = adapter.format(GenerateSQL, [demo], {**inputs_for(GenerateSQL), "feedback": "fix the join"})
    assert plain[0]["content"] == with_demo[0]["content"]
    task = with_demo[-1]["content"]
    assert task.startswith("(`schema_context` of this question is given at the start")
    assert "fix the join" in task
    assert "Another question" in with_demo[1]["content"]  # demos keep their own inputs
    # After a demo with its own question, the task names this question, not the demo's.
    assert HEAD["question"] in task and HEAD["evidence"] in task and "Another question" not in task
    assert HEAD["schema_context"] not in task


def test_dspy_layout_is_dspys_own_and_a_signature_without_head_fields_is_untouched():
    inputs = inputs_for(GenerateSQL)
    assert make_adapter(Settings(prompt_layout="dspy")).format(GenerateSQL, [], inputs) == \
        dspy.ChatAdapter().format(GenerateSQL, [], inputs)
    describer = {"table": "t", "column": "c", "column_type": "TEXT", "sample_values": ["a"], "sibling_columns": []}
    assert SharedHeadChatAdapter().format(ColumnDescriber, [], describer) == dspy.ChatAdapter().format(
        ColumnDescriber, [], describer)


def test_head_round_trips_and_other_text_has_none():
    assert parse_head(render_head(HEAD) + "\n\nYour input fields are: ...") == HEAD
    assert parse_head(dspy.ChatAdapter().format(GenerateSQL, [], inputs_for(GenerateSQL))[0]["content"]) == {}


def test_settings_pick_the_layout_and_the_retry_adapter_keeps_it():
    assert isinstance(make_adapter(Settings(prompt_layout="shared_head")), SharedHeadChatAdapter)
    plain = make_adapter(Settings())
    assert type(plain) is CountingChatAdapter
    assert isinstance(other_adapter(SharedHeadChatAdapter()), SharedHeadJSONAdapter)
    assert isinstance(other_adapter(SharedHeadJSONAdapter()), SharedHeadChatAdapter)
    assert type(other_adapter(plain)) is BoundedJSONAdapter
    assert type(other_adapter(dspy.JSONAdapter())) is CountingChatAdapter
    fallback = SharedHeadChatAdapter()._make_json_adapter_fallback()
    assert isinstance(fallback, SharedHeadJSONAdapter)
    assert type(CountingChatAdapter()._make_json_adapter_fallback()) is BoundedJSONAdapter


def test_a_scripted_lm_reads_inputs_in_either_layout():
    for layout in ("shared_head", "dspy"):
        lm = ScriptedLM({"GenerateSQL": {"sql": "SELECT 1"}})
        with dspy.context(lm=lm, adapter=make_adapter(Settings(prompt_layout=layout))):
            dspy.Predict(GenerateSQL)(**inputs_for(GenerateSQL))
        (name, seen), = lm.calls
        assert name == "GenerateSQL"
        assert seen["question"] == HEAD["question"] and seen["schema_context"] == HEAD["schema_context"]
        assert seen["dialect"] == "<dialect of GenerateSQL>"


def test_settings_pick_json_as_the_first_adapter_in_either_layout():
    assert type(make_adapter(Settings(adapter="json"))) is BoundedJSONAdapter
    assert isinstance(make_adapter(Settings(adapter="json", prompt_layout="shared_head")), SharedHeadJSONAdapter)
    assert isinstance(make_adapter(Settings(adapter="chat")), CountingChatAdapter)


def test_a_judge_through_json_is_one_constrained_call_and_its_expected_scores_are_read():
    from reflect_sql.lm.accounting import CostMeter
    from reflect_sql.lm.scripted import Probabilities
    from reflect_sql.programs.invoke import call_predictor, make_judge

    settings = Settings(adapter="json", judge_scores="expected")
    reply = {"missing_aspects": [], "relevance": Probabilities({8: 0.5, 2: 0.5}),
             "completeness": Probabilities({9: 1.0}),
             "rewritten_question": "stores by region"}
    lm = SchemaLM({"RetrievalJudge": reply})
    judge = make_judge(RetrievalJudge, 128, settings)
    with dspy.context(lm=lm, adapter=make_adapter(settings)), CostMeter() as meter:
        call = call_predictor(judge, "retrieval.judge", **inputs_for(RetrievalJudge))
    assert call.output is not None and meter.summary()["lm_calls"] == 1
    assert meter.summary()["adapter_fallbacks"] == 0
    [(name, _)] = lm.calls
    assert name == "RetrievalJudge"
    assert call.output.relevance == pytest.approx(5.0)  # 0.5 * 8 + 0.5 * 2, read from the JSON reply's tokens
    assert call.output.completeness == 9


def _schema(response_format: dict) -> dict:
    """The JSON schema a request asked the engine for (DSPy hands it as ``{"type": "json_schema", "schema": ...}``)."""
    return response_format["schema"]


@pytest.mark.parametrize("layout", ["dspy", "shared_head"])
def test_a_json_reply_is_bounded_to_each_score_scale_and_each_rationale_line(layout):
    from reflect_sql.signatures.scales import ONE_LINE_CHARS

    semantic = {"column_rationale": "ok", "column_consistency": 9, "granularity_rationale": "ok", "granularity": 9,
                "join_rationale": "ok", "join_consistency": 9, "logic_rationale": "ok", "query_logic": 9,
                "diagnosis": "none"}
    lm = SchemaLM({"SemanticJudge": semantic, "EntailmentJudge": {"e_schema": 4, "e_data": 5, "diagnosis": "none"},
                   "GenerateSQL": {"sql": "SELECT 1"}})
    with dspy.context(lm=lm, adapter=make_adapter(Settings(adapter="json", prompt_layout=layout))):
        for signature in (SemanticJudge, EntailmentJudge, GenerateSQL):
            dspy.Predict(signature)(**inputs_for(signature))
    semantic_schema, entailment_schema, generator_schema = (_schema(f)["properties"] for f in lm.engine_impl.response_formats)
    assert semantic_schema["query_logic"]["minimum"] == 1 and semantic_schema["query_logic"]["maximum"] == 10
    assert semantic_schema["join_rationale"]["maxLength"] == ONE_LINE_CHARS
    assert "maxLength" not in semantic_schema["diagnosis"]  # the generator's feedback is not cut
    assert (entailment_schema["e_data"]["minimum"], entailment_schema["e_data"]["maximum"]) == (1, 5)
    assert generator_schema["sql"] == {"type": "string", "title": "Sql"}  # not a judge: nothing added


def test_a_json_list_is_bounded_in_items_and_item_length():
    from reflect_sql.signatures.scales import LIST_ITEMS, ONE_LINE_CHARS

    reply = {"missing_aspects": ["no date column"], "relevance": 6, "completeness": 4, "rewritten_question": "q"}
    lm = SchemaLM({"RetrievalJudge": reply})
    with dspy.context(lm=lm, adapter=make_adapter(Settings(adapter="json", prompt_layout="shared_head"))):
        out = dspy.Predict(RetrievalJudge)(**inputs_for(RetrievalJudge))
    assert out.missing_aspects == ["no date column"]
    (schema,) = (_schema(f)["properties"] for f in lm.engine_impl.response_formats)
    assert schema["missing_aspects"]["type"] == "array" and schema["missing_aspects"]["maxItems"] == LIST_ITEMS
    assert schema["missing_aspects"]["items"] == {"type": "string", "maxLength": ONE_LINE_CHARS}
    assert "maxLength" not in schema["rewritten_question"]


def test_a_list_without_the_short_list_description_is_not_bounded():
    class ListTables(dspy.Signature):
        question: str = dspy.InputField()
        tables: list[str] = dspy.OutputField(desc="Every table the question needs.")

    assert bounds(ListTables) == {}
    assert set(bounds(RetrievalJudge)) == {"missing_aspects", "relevance", "completeness"}


def test_dspy_own_json_adapter_stays_unbounded_after_a_bounded_call():
    lm = SchemaLM({"EntailmentJudge": {"e_schema": 4, "e_data": 5, "diagnosis": "none"}})
    for adapter in (make_adapter(Settings(adapter="json")), dspy.JSONAdapter()):
        with dspy.context(lm=lm, adapter=adapter):
            dspy.Predict(EntailmentJudge)(**inputs_for(EntailmentJudge))
    bounded, plain = (_schema(f)["properties"]["e_data"] for f in lm.engine_impl.response_formats)
    assert bounded["maximum"] == 5 and "maximum" not in plain


def test_every_described_scale_reads_back():
    from reflect_sql.signatures.scales import SCALE_5, SCALE_10, Scale

    for scale in (SCALE_5, SCALE_10, Scale(0, 3)):
        desc = scale.describe("E_data", {scale.low: "wrong (or empty)", scale.high: "right; every row (a to b)"})
        assert Scale.described_in(desc) == scale
    assert Scale.described_in("The concrete problems and their fixes, or 'none'.") is None


def test_bounds_leave_the_chat_prompt_as_it_was():
    # The limits live only in the JSON schema: ChatAdapter's prompt (the default path, and the shipped
    # program's demos) is not touched by them.
    messages = dspy.ChatAdapter().format(SemanticJudge, [], inputs_for(SemanticJudge))
    text = prompt_text(messages)
    assert "minimum" not in text and "maxLength" not in text and "Constraints" not in text
    assert "`column_rationale` (str): One short line on column consistency." in text


@pytest.mark.parametrize("layout", ["dspy", "shared_head"])
def test_the_compact_template_is_shorter_keeps_the_head_and_parses(layout):
    from reflect_sql.lm.adapters import CompactTemplate

    replies = {"GenerateSQL": {"sql": "SELECT 1"}, "EntailmentJudge": {"e_schema": 4, "e_data": 5, "diagnosis": "none"},
               "SemanticJudge": {"column_rationale": "ok", "column_consistency": 9, "granularity_rationale": "ok",
                                 "granularity": 8, "join_rationale": "ok", "join_consistency": 7,
                                 "logic_rationale": "ok", "query_logic": 6, "diagnosis": "none"}}
    plain = make_adapter(Settings(adapter="json", prompt_layout=layout))
    compact = make_adapter(Settings(adapter="json", prompt_layout=layout, prompt_template="compact"))
    assert isinstance(compact, CompactTemplate) and not isinstance(plain, CompactTemplate)
    for signature in (GenerateSQL, SemanticJudge, EntailmentJudge):
        before, after = plain.format(signature, [], inputs_for(signature)), compact.format(signature, [], inputs_for(signature))
        if layout == "shared_head":
            assert after[0]["content"].startswith(render_head(HEAD))  # the head is the template's, unchanged
        text = prompt_text(after)
        assert len(text) < 0.85 * len(prompt_text(before)), signature.__name__
        assert "Outputs will be a JSON object" not in text and "must be formatted as a valid Python" not in text
        # Every output field is still described (its scale lives there), and the order is asked for.
        order = ", ".join(f"`{name}`" for name in signature.output_fields)
        assert after[-1]["content"].endswith(f"Respond with the JSON object: {order}.")
        for name, field in signature.output_fields.items():
            assert field.json_schema_extra["desc"] in after[0]["content"], name
        assert textwrap.dedent(signature.instructions).strip() in after[0]["content"]
        # Through a schema-constrained scripted LM, the reply parses as it does under DSPy's template.
        for adapter in (plain, compact):
            lm = SchemaLM(replies)
            with dspy.context(lm=lm, adapter=adapter):
                out = dspy.Predict(signature)(**inputs_for(signature))
            assert {k: out[k] for k in signature.output_fields} == replies[signature.__name__]
            assert lm.calls[0][1]["question"] == HEAD["question"]


def test_the_compact_template_needs_json_and_its_retry_goes_through_chat():
    with pytest.raises(ValueError, match="prompt_template compact needs adapter json"):
        Settings(prompt_template="compact")
    compact = make_adapter(Settings(adapter="json", prompt_layout="shared_head", prompt_template="compact"))
    assert isinstance(other_adapter(compact), SharedHeadChatAdapter)


def test_a_judges_diagnosis_is_bounded_only_when_asked():
    semantic = {"columns_right": True, "granularity_right": True, "joins_right": False, "logic_right": True,
                "diagnosis": "join on the store id"}
    from reflect_sql.signatures.semantic_judge import SemanticChecks

    for chars, expected in ((None, None), (120, 120)):
        lm = SchemaLM({"SemanticChecks": semantic, "GenerateSQL": {"sql": "SELECT 1"}})
        settings = Settings(adapter="json", prompt_layout="shared_head", prompt_template="compact",
                            judge_diagnosis_chars=chars)
        with dspy.context(lm=lm, adapter=make_adapter(settings)):
            out = dspy.Predict(SemanticChecks)(**inputs_for(SemanticChecks))
            dspy.Predict(GenerateSQL)(**inputs_for(GenerateSQL))
        assert out.diagnosis == "join on the store id"
        judge_schema, generator_schema = (_schema(f)["properties"] for f in lm.engine_impl.response_formats)
        assert judge_schema["diagnosis"].get("maxLength") == expected
        assert "maxLength" not in generator_schema["sql"]  # only a judge's diagnosis is cut
    with pytest.raises(ValueError, match="judge_diagnosis_chars needs adapter json"):
        Settings(judge_diagnosis_chars=120)
