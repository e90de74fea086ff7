"""The output contract other rooms build on, the ask command, and the small pieces under them."""
import json

import dspy
import pytest

from reflect_sql.cli import main
from reflect_sql.programs import prediction_to_json
from reflect_sql.programs.retriever import ContextProvider, RetrievedContext, SchemaRetriever, render_examples
from reflect_sql.programs.sql_text import clean_sql
from paper_settings import Settings
from reflect_sql.signatures.entailment_judge import EntailmentJudge
from reflect_sql.signatures.retrieval_judge import RetrievalJudge
from reflect_sql.signatures.semantic_judge import SemanticJudge

GOOD = "SELECT name, CAST(returns AS REAL) / orders AS return_rate FROM stores WHERE orders > 0"
SENTENCE = "North returns 30% of its orders and East 25%."


def test_prediction_fields_and_json_form(run, helpers):
    pred, _ = run(helpers.Script(GenerateSQL={"sql": GOOD}))
    assert isinstance(pred, dspy.Prediction)
    assert set(pred.keys()) == {"sql", "columns", "rows", "scores", "trace", "cost", "error", "retrieved"}
    assert pred.retrieved == {"tables": ["regions", "stores"],
                              "columns": ["regions.id", "regions.name", "stores.id", "stores.name", "stores.region_id",
                                          "stores.orders", "stores.returns"]}
    out = prediction_to_json(pred)
    assert list(out) == ["sql", "columns", "rows", "scores", "trace", "cost"]  # no "error" when there is none
    assert out["rows"] == [["North", 0.3], ["East", 0.25]]
    assert set(out["scores"]) == {"retrieval", "semantic", "entailment"}
    assert set(out["cost"]) == {"lm_calls", "prompt_tokens", "completion_tokens", "cached_prompt_tokens", "seconds"}
    assert json.loads(json.dumps(out)) == out
    for step in out["trace"]:
        assert {"loop", "round", "iteration", "inputs", "scores", "decision", "feedback", "rewrite", "failure", "cost"} <= set(step)


def test_json_form_carries_the_error_when_there_is_one(run, helpers):
    pred, _ = run(helpers.Script(GenerateSQL={"sql": "SELECT nme FROM stores"}), mode="single-pass")
    assert "nme" in prediction_to_json(pred)["error"]


def test_empty_question_is_a_user_error(engine, helpers):
    from reflect_sql.errors import UserError
    from reflect_sql.programs import build_program

    with pytest.raises(UserError, match="question is empty"):
        build_program(Settings(), engine)(question="   ")


def test_unknown_mode_is_a_user_error(engine):
    from reflect_sql.errors import UserError
    from reflect_sql.programs import build_program

    with pytest.raises(UserError, match="unknown mode"):
        build_program(Settings(), engine, mode="twice")


# --- CLI -----------------------------------------------------------------------------------

@pytest.fixture
def scripted_lms(monkeypatch, helpers):
    """``configure_lms`` replaced by two scripted LMs (generator, judge); returns them for inspection."""
    import reflect_sql.lm.factory as factory

    made = {}

    def configure(settings):
        made["settings"] = settings
        made["generator"] = helpers.ScriptedLM(helpers.Script(GenerateSQL={"sql": GOOD}, WriteAnswer={"answer": SENTENCE}),
                                                model="scripted/gen")
        made["judge"] = helpers.ScriptedLM(helpers.Script(), model="scripted/judge")
        return made["generator"], made["judge"]

    monkeypatch.setattr(factory, "configure_lms", configure)
    return made


def test_ask_json_prints_exactly_the_contract(db_path, scripted_lms, capsys):
    code = main(["ask", "--db", db_path, "--json", "What is the return rate of each store?"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert list(out) == ["sql", "columns", "rows", "scores", "trace", "cost", "answer", "answer_source"]
    assert out["sql"] == GOOD and out["rows"] == [["North", 0.3], ["East", 0.25]]
    assert out["answer"] == SENTENCE and out["answer_source"] == "model"
    # Without --kb-dir the whole schema is the context: no retrieval judge, as nothing could widen it;
    # the fourth call is the generator's sentence, after the entailment check passed.
    assert out["cost"]["lm_calls"] == 4
    assert [n for n, _ in scripted_lms["generator"].calls] == ["GenerateSQL", "WriteAnswer"]
    assert {n for n, _ in scripted_lms["judge"].calls} == {"SemanticJudge", "EntailmentJudge"}


def test_ask_flags_turn_the_loops_off(db_path, scripted_lms, capsys):
    code = main(["ask", "--db", db_path, "--json", "--no-retrieval-loop", "--no-sql-reflection", "--no-entailment",
                 "--no-enrichment", "--lm", "openai/some-model", "What is the return rate of each store?"])
    out = json.loads(capsys.readouterr().out)
    s = scripted_lms["settings"]
    assert code == 0 and s.lm == "openai/some-model"
    assert not (s.use_retrieval_loop or s.use_syntax_reflection or s.use_semantic_reflection or s.use_entailment or s.use_enrichment)
    assert scripted_lms["judge"].calls == [] and out["cost"]["lm_calls"] == 1
    assert out["scores"] == {"retrieval": None, "semantic": None, "entailment": None}
    # Nothing was entailed, so nothing is told in words.
    assert out["answer"] is None and out["answer_source"] is None


def test_ask_single_pass_mode(db_path, scripted_lms, capsys):
    assert main(["ask", "--db", db_path, "--json", "--mode", "single-pass", "What is the return rate of each store?"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [s["loop"] for s in out["trace"]] == ["retrieval", "synthesis.generate", "execution", "answer"]


def test_ask_prints_the_answer_the_sql_and_the_trace(db_path, scripted_lms, capsys):
    assert main(["ask", "--db", db_path, "What is the return rate of each store?"]) == 0
    text = capsys.readouterr().out
    for expected in ("SQL", "CAST(returns AS REAL)", "North", "0.30", "Trace", "retrieve", "semantic",
                     "entail", SENTENCE, "cost: 4 LM calls"):  # no retrieval judge over the whole schema
        assert expected in text, expected
    # The SQL is printed whole on its own line; the trace is one line per step within 80 columns.
    assert "SELECT name, CAST(returns AS REAL) / orders AS return_rate FROM stores WHERE orders > 0" in text.splitlines()
    assert text.splitlines()[0] == SENTENCE  # the sentence comes first
    trace = text.split("Trace")[1].splitlines()[1:]
    steps = [line for line in trace if line[:1].isdigit()]
    assert len(steps) >= 4 and all(len(line) <= 80 for line in steps)
    semantic = next(line for line in steps if " semantic " in line)
    assert "accept" in semantic and "C9 G9 J9 Q9 =9 θ5" in semantic


def test_trace_lines_fit_80_columns_whatever_the_decision():
    from reflect_sql.cli.ask_cmd import trace_lines

    step = {"loop": "synthesis.semantic", "round": 12, "iteration": 3, "decision": "regenerate " * 30,
            "failure": "semantic judge failed", "scores": {"C": 1, "G": 10, "J": 10, "Q": 2, "S": 6.456, "threshold": 5.0},
            "cost": {"lm_calls": 2, "seconds": 1234.5}, "inputs": {}}
    (line,) = trace_lines([step])
    assert len(line) == 80 and line.startswith("12.3   semantic   ! regenerate")
    assert line.endswith("C1 G10 J10 Q2 =6.5 θ5 1234.5s") and "…" in line


def test_ask_rejects_an_empty_question(db_path, scripted_lms, capsys):
    assert main(["ask", "--db", db_path, "  "]) == 2
    assert "question is empty" in capsys.readouterr().err
    assert "settings" not in scripted_lms  # it stopped before building anything


def test_ask_on_a_missing_database_is_one_clear_line(tmp_path, scripted_lms, capsys):
    assert main(["ask", "--db", str(tmp_path / "nope.sqlite"), "How many stores?"]) == 2
    assert "does not exist" in capsys.readouterr().err


# --- small pieces --------------------------------------------------------------------------

def test_schema_retriever_renders_the_whole_schema(engine):
    retriever = SchemaRetriever(engine.introspect())
    assert isinstance(retriever, ContextProvider)
    context = retriever.retrieve("anything", k=1, m=1)
    assert isinstance(context, RetrievedContext)
    text = context.render()
    assert "CREATE TABLE stores (" in text and "CREATE TABLE regions (" in text
    assert "id INTEGER PRIMARY KEY" in text
    assert "FOREIGN KEY (region_id) REFERENCES regions(id)" in text
    assert "'North'" in text  # sample values as comments
    assert context.tables == ["regions", "stores"]


def test_examples_are_rendered_once():
    class Ctx:
        examples = [{"question": "How many stores?", "sql": "SELECT COUNT(*) FROM stores"},
                    {"question": "Shown already", "sql": "SELECT 1"}]

    text = render_examples(Ctx(), rendered="-- Verified example: Shown already")
    assert "How many stores?" in text and "SELECT COUNT(*) FROM stores" in text and "Shown already" not in text


@pytest.mark.parametrize("raw, sql", [
    ("SELECT 1", "SELECT 1"),
    ("```sql\nSELECT 1;\n```", "SELECT 1"),
    ("Here is the query:\nSELECT a FROM t;", "SELECT a FROM t"),
    ("```\nWITH x AS (SELECT 1) SELECT * FROM x\n```", "WITH x AS (SELECT 1) SELECT * FROM x"),
    ("```sql\nSELECT 1", "SELECT 1"),
    ("", ""),
    (None, ""),
    ("SELECT COUNT(*) FROM t [[ ## completed ## ]]", "SELECT COUNT(*) FROM t"),
    ("[[ ## sql ## ]]\nSELECT 1\n\n[[ ## completed ## ]]", "SELECT 1"),
    ("Comment: SELECT a FROM t", "SELECT a FROM t"),  # prose that sqlglot would take for a Command
    # A whole write statement stays whole, so the SQL gate refuses it: its SELECT alone would be a
    # different query, answered as if it were the model's.
    ("INSERT INTO t SELECT a FROM b;", "INSERT INTO t SELECT a FROM b"),
    ("CREATE TABLE x AS SELECT 1", "CREATE TABLE x AS SELECT 1"),
    ("DELETE FROM t WHERE a IN (SELECT a FROM b)", "DELETE FROM t WHERE a IN (SELECT a FROM b)"),
    ("REPLACE INTO t SELECT a FROM b", "REPLACE INTO t SELECT a FROM b"),
    ("```sql\nreplace into t select a from b\n```", "replace into t select a from b"),
    ("VACUUM INTO '/tmp/x'; SELECT 1", "VACUUM INTO '/tmp/x'; SELECT 1"),
    ("ATTACH DATABASE 'x' AS y; SELECT a FROM t", "ATTACH DATABASE 'x' AS y; SELECT a FROM t"),
    ("CALL p(); SELECT 1", "CALL p(); SELECT 1"),
    # A label ending in ';' is still prose before the query.
    ("Fixed query;\nSELECT a FROM t", "SELECT a FROM t"),
    ("Corrected; SELECT a FROM t", "SELECT a FROM t"),
    ("Updated the join:\nSELECT a FROM t", "SELECT a FROM t"),
    # Labels that open with a statement keyword are prose too: the keyword lacks its syntax.
    ("Replace the join:\nSELECT a FROM t", "SELECT a FROM t"),
    ("Drop the DISTINCT:\nSELECT a FROM t", "SELECT a FROM t"),
    ("Create a query: SELECT a FROM t", "SELECT a FROM t"),
    ("Update the join to use LEFT JOIN:\nSELECT a FROM t", "SELECT a FROM t"),
    ("Delete the filter, then: SELECT a FROM t", "SELECT a FROM t"),
    ("Call it like this: SELECT a FROM t", "SELECT a FROM t"),
    ("Do this instead: SELECT a FROM t", "SELECT a FROM t"),
    ("Copy of the fixed query: SELECT a FROM t", "SELECT a FROM t"),
    ("Explain: SELECT a FROM t", "SELECT a FROM t"),
    # A comment, a byte-order mark or a stray ';' before a write does not hide it.
    ("-- fix\nINSERT INTO t SELECT a FROM b", "-- fix\nINSERT INTO t SELECT a FROM b"),
    ("/* note */ UPDATE t SET a = (SELECT max(a) FROM b)", "/* note */ UPDATE t SET a = (SELECT max(a) FROM b)"),
    ("\ufeffDELETE FROM t WHERE a IN (SELECT a FROM b)", "\ufeffDELETE FROM t WHERE a IN (SELECT a FROM b)"),
    ("; DROP TABLE t; SELECT 1", "; DROP TABLE t; SELECT 1"),
    ("UPDATE OR REPLACE t AS x SET a = (SELECT 1)", "UPDATE OR REPLACE t AS x SET a = (SELECT 1)"),
    ("CREATE TEMP VIEW v AS SELECT 1", "CREATE TEMP VIEW v AS SELECT 1"),
    ("PRAGMA writable_schema = 1; SELECT 1", "PRAGMA writable_schema = 1; SELECT 1"),
    ("COPY (SELECT a FROM t) TO '/tmp/x'", "COPY (SELECT a FROM t) TO '/tmp/x'"),
    ("DO $$ BEGIN PERFORM (SELECT 1); END $$", "DO $$ BEGIN PERFORM (SELECT 1); END $$"),
    ("GRANT ALL ON t TO public; SELECT 1", "GRANT ALL ON t TO public; SELECT 1"),
])
def test_clean_sql(raw, sql):
    assert clean_sql(raw) == sql


@pytest.mark.parametrize("signature, fields", [
    (RetrievalJudge, {"relevance": 10, "completeness": 10}),
    (SemanticJudge, {"column_consistency": 10, "granularity": 10, "join_consistency": 10, "query_logic": 10}),
    (EntailmentJudge, {"e_schema": 5, "e_data": 5}),
])
def test_judges_have_bounded_scores_and_a_rubric(signature, fields):
    import typing

    for name, top in fields.items():
        annotation = signature.output_fields[name].annotation
        assert annotation is int, name
    # The rubric says what the bottom, the middle and the top of the scale mean.
    mid = 3 if top == 5 else 5
    for anchor in ("1 = ", f"{mid} = ", f"{top} = "):
        assert anchor in signature.instructions, (signature.__name__, anchor)


def test_copies_share_the_engine_and_lms_but_not_the_predictors(engine, helpers):
    """Optimizers deep-copy programs: the copy must run on the same database and LMs."""
    from reflect_sql.programs import build_program

    judge = helpers.ScriptedLM(helpers.Script())
    program = build_program(Settings(), engine, judge_lm=judge)
    copy = program.deepcopy()
    assert copy.handles is program.handles and copy.handles.engine is engine and copy.handles.judge_lm is judge
    assert copy.synthesis_loop.generator is not program.synthesis_loop.generator
    assert copy.synthesis_loop.handles is copy.handles  # one set of handles throughout the copy
    assert [n for n, _ in copy.named_predictors()] == [
        "retrieval_loop.judge", "synthesis_loop.generator", "synthesis_loop.repairer", "synthesis_loop.judge",
        "entailment_loop.judge"]


@pytest.mark.slow
def test_ask_builds_the_kb_on_first_use_and_refuses_another_databases_kb(db_path, make_db, tmp_path, scripted_lms, capsys):
    kb_dir = tmp_path / "kb"
    assert main(["ask", "--db", db_path, "--kb-dir", str(kb_dir), "--json", "What is the return rate of each store?"]) == 0
    captured = capsys.readouterr()
    assert "building the knowledge base" in captured.err and (kb_dir / "kb.json").is_file()
    out = json.loads(captured.out)
    assert out["sql"] == GOOD and "stores" in [s for step in out["trace"] if step["loop"] == "retrieval"
                                              for s in step["inputs"]["tables"]]
    # A second question reuses the KB: no rebuild.
    assert main(["ask", "--db", db_path, "--kb-dir", str(kb_dir), "--json", "What is the return rate of each store?"]) == 0
    assert "building" not in capsys.readouterr().err
    other = make_db(name="other.sqlite")
    assert main(["ask", "--db", other, "--kb-dir", str(kb_dir), "How many stores?"]) == 2
    assert "holds the KB of" in capsys.readouterr().err


@pytest.mark.slow
def test_demo_builds_the_database_and_its_kb_once_then_asks_the_papers_questions(tmp_path, monkeypatch, helpers, capsys):
    import reflect_sql.lm.factory as factory

    generator = helpers.ScriptedLM(helpers.Script(GenerateSQL={"sql": "SELECT COUNT(*) AS n FROM orders"}), model="scripted/gen")
    judge = helpers.ScriptedLM(helpers.Script(), model="scripted/judge")
    monkeypatch.setattr(factory, "configure_lms", lambda settings: (generator, judge))
    db, kb = tmp_path / "demo.sqlite", tmp_path / "kb"

    assert main(["demo", "--db", str(db), "--kb-dir", str(kb), "--mode", "single-pass"]) == 0
    out = capsys.readouterr().out
    headers = [line for line in out.splitlines() if line.startswith("=== Q")]
    assert [h.split(":")[0] for h in headers] == ["=== Q0", "=== Q2", "=== Q1"]  # the paper's order
    assert out.count("SELECT COUNT(*) AS n FROM orders") == 3 and "19164" in out  # seed 0 has 19,164 orders
    built = {p: p.stat().st_mtime_ns for p in kb.rglob("*") if p.is_file()}
    assert db.is_file() and built

    # A second demo reuses the database and the KB, and an unknown question id is a clear error.
    db_bytes = db.read_bytes()
    assert main(["demo", "--db", str(db), "--kb-dir", str(kb), "--mode", "single-pass", "--questions", "3"]) == 0
    assert db.read_bytes() == db_bytes
    assert {p: p.stat().st_mtime_ns for p in kb.rglob("*") if p.is_file()} == built  # not rebuilt
    capsys.readouterr()
    assert main(["demo", "--db", str(db), "--kb-dir", str(kb), "--questions", "0,9999"]) == 2
    assert "no question_id 9999" in capsys.readouterr().err
