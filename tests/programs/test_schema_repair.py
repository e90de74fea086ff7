"""Schema-grounded repair (programs/schema_repair.py) in the syntax loop, on the real BIRD superhero
database read in place, with a scripted LM: what the rules rewrite without an LM call, what they add
to the repairer's error and context, and that each setting switched off gives back the engine's
error alone."""
import contextlib
import sqlite3

import dspy
import pytest

from paper_settings import Settings

WRONG_ALIAS = ("SELECT T1.power_name FROM superhero AS T1 JOIN hero_power AS T2 ON T1.id = T2.hero_id "
               "JOIN superpower AS T3 ON T2.power_id = T3.id WHERE T1.superhero_name = '3-D Man'")
POWERS = ("SELECT T3.power_name FROM superhero AS T1 JOIN hero_power AS T2 ON T1.id = T2.hero_id "
          "JOIN superpower AS T3 ON T2.power_id = T3.id WHERE T1.superhero_name = '3-D Man'")
MISSING_TABLE = "SELECT T1.power_name FROM superhero AS T1 WHERE T1.superhero_name = '3-D Man'"
TYPO = "SELECT T1.superhero_name FROM superhero AS T1 WHERE T1.hieght_cm > 200"
TALL = "SELECT T1.superhero_name FROM superhero AS T1 WHERE T1.height_cm > 200"
# A literal the column never holds, in SQL that fails for another reason no rule knows about.
WRONG_VALUE = ("SELECT COUNT(*) FROM superhero AS T1 JOIN publisher AS T2 ON T1.publisher_id = T2.id "
               "WHERE T2.publisher_name = 'Marvel' AND nosuchfunc(T1.id) > 0")
MARVEL = ("SELECT COUNT(*) FROM superhero AS T1 JOIN publisher AS T2 ON T1.publisher_id = T2.id "
          "WHERE T2.publisher_name = 'Marvel Comics'")
QUESTION = "What are the powers of 3-D Man?"
OFF = dict(repair_requalify=False, repair_add_joins=False, repair_pull_tables=False, repair_suggest_names=False, repair_suggest_values=False)


def steps(pred, loop):
    return [s for s in pred.trace if s["loop"] == loop]


@pytest.fixture(scope="module")
def superhero_db(benchmarks_dir):
    return benchmarks_dir / "bird" / "dev_databases" / "superhero" / "superhero.sqlite"


@pytest.fixture
def engine(superhero_db):  # the `run` fixture answers on this database
    from reflect_sql.db import open_engine
    from reflect_sql.settings import Settings as Base

    with open_engine(str(superhero_db), Base()) as e:
        yield e


@pytest.fixture(scope="module")
def superhero_kb(benchmarks_dir, superhero_db, tmp_path_factory):
    from reflect_sql.kb.build import build_kb

    bird = benchmarks_dir / "bird"
    kb_dir = tmp_path_factory.mktemp("superhero-kb")
    build_kb(str(superhero_db), kb_dir, Settings(), descriptions=superhero_db.parent / "database_description",
             tables_json=bird / "dev_tables.json")
    return kb_dir


@pytest.fixture
def kb_retriever(superhero_kb):
    from reflect_sql.kb.retrieve import Retriever

    retriever = Retriever(superhero_kb, Settings(k_tables=1, m_columns=2))
    yield retriever
    retriever.close()


def run_on(engine, retriever, script, settings, question=QUESTION):
    """Like the `run` fixture, with another retriever."""
    from reflect_sql.lm.adapters import make_adapter
    from reflect_sql.lm.scripted import ScriptedLM
    from reflect_sql.programs import build_program

    lm = ScriptedLM(script)
    with dspy.context(lm=lm, adapter=make_adapter(settings)):
        pred = build_program(settings, engine, retriever)(question=question)
    return pred, lm


# --- rule 1: requalify ---------------------------------------------------------------------------

def test_a_column_on_the_wrong_alias_is_requalified_without_an_lm_call(run, engine, helpers):
    script = helpers.Script(GenerateSQL={"sql": WRONG_ALIAS})  # no RepairSQL: a call to it would fail the test
    pred, lm = run(script, Settings(), question=QUESTION)
    assert "RepairSQL" not in helpers.calls_by_signature(lm)
    assert pred.sql == POWERS and engine.check(pred.sql) is None
    assert {tuple(r) for r in pred.rows} == {("Agility",), ("Super Strength",), ("Stamina",), ("Super Speed",)}
    (step,) = steps(pred, "synthesis.schema_repair")
    assert step["inputs"]["sql"] == WRONG_ALIAS and step["rewrite"]["sql"] == POWERS
    assert step["rewrite"]["changes"] == ["T1.power_name -> T3.power_name"]
    assert [s["decision"] for s in steps(pred, "synthesis.syntax")] == ["schema repair rewrote it: compile again", "compiles"]


def test_requalifying_matches_names_as_sqlite_does_and_keeps_quoting(run, engine, helpers):
    sql = ('SELECT "t1"."POWER_NAME" FROM superhero AS "T1" JOIN hero_power AS t2 ON "T1".id = t2.hero_id '
           'JOIN superpower AS "Power Table" ON t2.power_id = "Power Table".id WHERE "T1".superhero_name = \'3-D Man\'')
    pred, lm = run(helpers.Script(GenerateSQL={"sql": sql}), Settings(), question=QUESTION)
    assert "RepairSQL" not in helpers.calls_by_signature(lm)
    assert '"Power Table"."POWER_NAME"' in pred.sql and engine.check(pred.sql) is None
    assert len(pred.rows) == 4


def test_a_column_two_tables_of_the_query_have_is_not_guessed(run, helpers):
    sql = ("SELECT T1.id FROM hero_power AS T1 JOIN superhero AS T2 ON T1.hero_id = T2.id "
           "JOIN superpower AS T3 ON T1.power_id = T3.id WHERE T2.superhero_name = '3-D Man'")
    fixed = sql.replace("SELECT T1.id", "SELECT T3.id")
    pred, lm = run(helpers.Script(GenerateSQL={"sql": sql}, RepairSQL={"repaired_sql": fixed}), Settings(), question=QUESTION)
    (repair,) = helpers.inputs_of(lm, "RepairSQL")
    assert repair["error"].startswith("no such column: T1.id")
    assert "T2 (superhero)" in repair["error"] and "T3 (superpower)" in repair["error"]
    assert pred.sql == fixed


def test_requalify_off_leaves_the_fix_to_the_repairer_with_the_raw_error(run, helpers):
    script = helpers.Script(GenerateSQL={"sql": WRONG_ALIAS}, RepairSQL={"repaired_sql": POWERS})
    pred, lm = run(script, Settings(repair_requalify=False), question=QUESTION)
    (repair,) = helpers.inputs_of(lm, "RepairSQL")
    assert repair["error"] == "no such column: T1.power_name"
    assert not steps(pred, "synthesis.schema_repair") and pred.sql == POWERS


# --- rule 2: pull in a table retrieval missed ----------------------------------------------------

@pytest.mark.slow
def test_a_column_of_a_table_outside_the_context_pulls_it_in_with_its_join_path(engine, kb_retriever, helpers):
    settings = Settings(k_tables=1, m_columns=2, repair_add_joins=False)
    script = helpers.Script(GenerateSQL=[{"sql": MISSING_TABLE}, {"sql": POWERS}],
                            RepairSQL={"repaired_sql": MISSING_TABLE})  # the small model's habit: the same SQL back
    pred, lm = run_on(engine, kb_retriever, script, settings)
    first_gen, second_gen = helpers.inputs_of(lm, "GenerateSQL")[:2]
    assert "CREATE TABLE superpower" not in first_gen["schema_context"]  # retrieval missed it
    (repair,) = helpers.inputs_of(lm, "RepairSQL")
    assert repair["error"].startswith("no such column: T1.power_name")
    assert "table superpower has it" in repair["error"]
    assert "hero_power.hero_id = superhero.id; hero_power.power_id = superpower.id" in repair["error"]
    assert "superhero is T1 in the query" in repair["error"]
    # The repairer and the next generation see the table, and the bridge that joins it.
    for inputs in (repair, second_gen):
        assert "CREATE TABLE superpower" in inputs["schema_context"] and "power_name" in inputs["schema_context"]
        assert "power_id INTEGER REFERENCES superpower(id)" in inputs["schema_context"]
    (step,) = steps(pred, "synthesis.schema_repair")
    assert step["inputs"]["pulled_tables"] == ["superpower"]
    assert pred.sql == POWERS and len(pred.rows) == 4


def test_pull_tables_off_gives_the_repairer_the_raw_error(run, helpers):
    script = helpers.Script(GenerateSQL={"sql": MISSING_TABLE}, RepairSQL={"repaired_sql": POWERS})
    pred, lm = run(script, Settings(repair_pull_tables=False, repair_add_joins=False), question=QUESTION)
    (repair,) = helpers.inputs_of(lm, "RepairSQL")
    assert repair["error"] == "no such column: T1.power_name"
    assert pred.sql == POWERS


def test_pull_tables_names_the_join_path_without_a_kb(run, helpers):
    script = helpers.Script(GenerateSQL={"sql": MISSING_TABLE}, RepairSQL={"repaired_sql": POWERS})
    pred, lm = run(script, Settings(repair_add_joins=False), question=QUESTION)
    (repair,) = helpers.inputs_of(lm, "RepairSQL")
    assert "Join superpower through superhero -> hero_power -> superpower" in repair["error"]


@contextlib.contextmanager
def hand_built(tmp_path, script: str):
    """An engine on a SQLite file made by ``script``."""
    from reflect_sql.db import open_engine

    path = tmp_path / "hand_built.sqlite"
    with sqlite3.connect(path) as conn:
        conn.executescript(script)
    with open_engine(str(path), Settings()) as engine:
        yield engine


def repaired(engine, sql: str):
    """The schema-grounded rules' outcome for ``sql``, which fails on ``engine``."""
    from reflect_sql.programs import schema_repair

    return schema_repair.repair(sql, engine.check(sql), engine.introspect(), Settings(), engine.dialect)


# --- rule 2a: join in a table the query lacks ------------------------------------------------------

def test_a_column_of_a_table_outside_the_query_is_joined_in_without_an_lm_call(run, engine, helpers):
    pred, lm = run(helpers.Script(GenerateSQL={"sql": MISSING_TABLE}), Settings(), question=QUESTION)
    assert "RepairSQL" not in helpers.calls_by_signature(lm)
    assert "INNER JOIN hero_power AS hero_power ON hero_power.hero_id = T1.id" in pred.sql
    assert "INNER JOIN superpower AS superpower ON hero_power.power_id = superpower.id" in pred.sql
    assert pred.sql.startswith("SELECT superpower.power_name FROM superhero AS T1") and engine.check(pred.sql) is None
    assert {tuple(r) for r in pred.rows} == {("Agility",), ("Super Strength",), ("Stamina",), ("Super Speed",)}
    (step,) = steps(pred, "synthesis.schema_repair")
    assert step["rewrite"]["changes"] == ["joined superhero -> hero_power -> superpower",
                                          "T1.power_name -> superpower.power_name"]
    assert step["inputs"]["pulled_tables"] == ["superpower"]


def test_a_column_written_on_a_query_table_is_joined_from_that_table(tmp_path):
    """oi.category_id: order_items lacks it, menu_items has it. Joined from categories (the first table
    by name) order_items would stay unjoined; joined from oi's own table the query is right."""
    sql = ("SELECT c.name, SUM(oi.qty) FROM categories AS c JOIN order_items AS oi ON c.id = oi.category_id "
           "GROUP BY c.name ORDER BY c.name")
    with hand_built(tmp_path, """
            CREATE TABLE categories (id INTEGER PRIMARY KEY, name TEXT);
            CREATE TABLE menu_items (id INTEGER PRIMARY KEY, category_id INTEGER REFERENCES categories(id));
            CREATE TABLE order_items (id INTEGER PRIMARY KEY, menu_item_id INTEGER REFERENCES menu_items(id), qty INTEGER);
            INSERT INTO categories VALUES (1, 'mains'), (2, 'desserts');
            INSERT INTO menu_items VALUES (10, 1), (20, 2);
            INSERT INTO order_items VALUES (1, 10, 2), (2, 20, 5), (3, 10, 1);
        """) as engine:
        outcome = repaired(engine, sql)
        assert outcome.rewrites == ["joined order_items -> menu_items", "oi.category_id -> menu_items.category_id"]
        assert "INNER JOIN menu_items AS menu_items ON oi.menu_item_id = menu_items.id" in outcome.sql
        assert engine.execute(outcome.sql).rows == [("desserts", 5), ("mains", 3)]


def test_a_chain_through_a_table_the_query_has_goes_through_its_alias(tmp_path):
    """o.category_id: orders lacks it; the chain orders -> order_items -> menu_items passes order_items,
    which the query has as oi. Joining a second order_items would count each line once per line of
    its order."""
    sql = ("SELECT o.category_id, SUM(oi.qty) FROM orders AS o JOIN order_items AS oi ON o.id = oi.order_id "
           "WHERE o.shift = 'DINNER' GROUP BY o.category_id ORDER BY o.category_id")
    with hand_built(tmp_path, """
            CREATE TABLE menu_items (id INTEGER PRIMARY KEY, category_id INTEGER);
            CREATE TABLE orders (id INTEGER PRIMARY KEY, shift TEXT);
            CREATE TABLE order_items (id INTEGER PRIMARY KEY, order_id INTEGER REFERENCES orders(id),
                                      menu_item_id INTEGER REFERENCES menu_items(id), qty INTEGER);
            INSERT INTO menu_items VALUES (10, 1), (20, 2);
            INSERT INTO orders VALUES (1, 'DINNER'), (2, 'LUNCH');
            INSERT INTO order_items VALUES (1, 1, 10, 2), (2, 1, 20, 5), (3, 1, 10, 1), (4, 2, 10, 7);
        """) as engine:
        outcome = repaired(engine, sql)
        assert outcome.rewrites[0] == "joined order_items -> menu_items"
        assert outcome.sql.count("order_items") == 1
        assert engine.execute(outcome.sql).rows == [(1, 3), (2, 5)]


def test_tables_this_rule_joined_are_reused_by_later_references(tmp_path):
    """o.category_id joins menu_items; o.label then needs categories, one hop further: it goes on
    from that menu_items instead of joining a second one (which would make every column ambiguous)."""
    sql = ("SELECT o.category_id, o.label, SUM(oi.qty) FROM orders AS o JOIN order_items AS oi ON o.id = oi.order_id "
           "GROUP BY o.category_id, o.label ORDER BY o.category_id")
    with hand_built(tmp_path, """
            CREATE TABLE categories (id INTEGER PRIMARY KEY, label TEXT);
            CREATE TABLE menu_items (id INTEGER PRIMARY KEY, category_id INTEGER REFERENCES categories(id));
            CREATE TABLE orders (id INTEGER PRIMARY KEY, shift TEXT);
            CREATE TABLE order_items (id INTEGER PRIMARY KEY, order_id INTEGER REFERENCES orders(id),
                                      menu_item_id INTEGER REFERENCES menu_items(id), qty INTEGER);
            INSERT INTO categories VALUES (1, 'mains'), (2, 'desserts');
            INSERT INTO menu_items VALUES (10, 1), (20, 2);
            INSERT INTO orders VALUES (1, 'DINNER');
            INSERT INTO order_items VALUES (1, 1, 10, 2), (2, 1, 20, 5);
        """) as engine:
        outcome = repaired(engine, sql)
        joins = [r for r in outcome.rewrites if r.startswith("joined")]
        assert joins == ["joined order_items -> menu_items", "joined menu_items -> categories"]
        assert outcome.sql.count("JOIN menu_items") == 1 and outcome.sql.count("JOIN categories") == 1
        assert engine.execute(outcome.sql).rows == [(1, "mains", 2), (2, "desserts", 5)]


def test_a_chain_leaving_a_table_the_query_uses_twice_is_explained_not_joined(tmp_path):
    sql = ("SELECT a.category_id FROM order_items AS a JOIN order_items AS b ON a.parent_id = b.id")
    with hand_built(tmp_path, """
            CREATE TABLE menu_items (id INTEGER PRIMARY KEY, category_id INTEGER);
            CREATE TABLE order_items (id INTEGER PRIMARY KEY, menu_item_id INTEGER REFERENCES menu_items(id),
                                      parent_id INTEGER);
        """) as engine:
        outcome = repaired(engine, sql)
        assert not any(r.startswith("joined") for r in outcome.rewrites)
        assert "menu_items" in outcome.feedback() and "JOIN menu_items" not in (outcome.sql or "")


def test_a_join_with_two_possible_links_is_explained_not_guessed(run, helpers):
    sql = "SELECT s.superhero_name FROM superhero AS s WHERE s.colour = 'Blue'"  # eye, hair or skin colour?
    fixed = ("SELECT s.superhero_name FROM superhero AS s JOIN colour AS c ON s.eye_colour_id = c.id "
             "WHERE c.colour = 'Blue'")
    pred, lm = run(helpers.Script(GenerateSQL={"sql": sql}, RepairSQL={"repaired_sql": fixed}), Settings(),
                   question="Which heroes have blue eyes?")
    (repair,) = helpers.inputs_of(lm, "RepairSQL")
    assert "table colour has it" in repair["error"] and "superhero.eye_colour_id" in repair["error"]
    assert pred.sql == fixed


# --- rule 3: closest names -----------------------------------------------------------------------

def test_a_misspelt_column_gets_the_closest_names(run, helpers):
    script = helpers.Script(GenerateSQL={"sql": TYPO}, RepairSQL={"repaired_sql": TALL})
    pred, lm = run(script, Settings(), question="Which heroes are taller than 200 cm?")
    (repair,) = helpers.inputs_of(lm, "RepairSQL")
    assert repair["error"].startswith("no such column: T1.hieght_cm")
    closest = repair["error"].split("the closest columns:")[1]
    assert closest.strip().startswith("T1.height_cm (superhero)")
    assert pred.sql == TALL and pred.rows


def test_a_name_no_table_has_pulls_in_the_table_whose_column_means_it(engine, kb_retriever, helpers):
    """``T1.power`` exists nowhere; the KB's column documents say which columns mean "power", and
    their tables join the context with their join paths (retrieval showed superhero alone)."""
    unknown = "SELECT T1.power FROM superhero AS T1 WHERE T1.superhero_name = '3-D Man'"
    settings = Settings(k_tables=1, m_columns=2)
    script = helpers.Script(GenerateSQL={"sql": unknown}, RepairSQL={"repaired_sql": POWERS})
    pred, lm = run_on(engine, kb_retriever, script, settings)
    (repair,) = helpers.inputs_of(lm, "RepairSQL")
    first_gen = helpers.inputs_of(lm, "GenerateSQL")[0]
    assert "CREATE TABLE superpower" not in first_gen["schema_context"]  # retrieval missed it
    assert "T1.power: no table has a column power" in repair["error"]
    (step,) = steps(pred, "synthesis.schema_repair")
    assert "superpower" in step["inputs"]["pulled_tables"]
    assert "Join superpower through superhero -> hero_power -> superpower" in repair["error"]
    assert "CREATE TABLE superpower" in repair["schema_context"] and "power_name" in repair["schema_context"]
    assert pred.sql == POWERS and len(pred.rows) == 4


def test_without_a_kb_a_name_no_table_has_gets_the_closest_names_only(run, helpers):
    script = helpers.Script(GenerateSQL={"sql": TYPO}, RepairSQL={"repaired_sql": TALL})
    pred, lm = run(script, Settings(), question="Which heroes are taller than 200 cm?")
    (repair,) = helpers.inputs_of(lm, "RepairSQL")
    assert "by meaning" not in repair["error"]
    assert "pulled_tables" not in steps(pred, "synthesis.schema_repair")[0]["inputs"]


def test_a_misspelt_table_gets_the_closest_tables(run, helpers):
    script = helpers.Script(GenerateSQL={"sql": TALL.replace("FROM superhero", "FROM superheroes")},
                            RepairSQL={"repaired_sql": TALL})
    pred, lm = run(script, Settings(), question="Which heroes are taller than 200 cm?")
    (repair,) = helpers.inputs_of(lm, "RepairSQL")
    assert "table superheroes does not exist; the closest tables: superhero" in repair["error"]


def test_suggest_names_off_gives_the_repairer_the_raw_error(run, helpers):
    script = helpers.Script(GenerateSQL={"sql": TYPO}, RepairSQL={"repaired_sql": TALL})
    pred, lm = run(script, Settings(repair_suggest_names=False), question="Which heroes are taller than 200 cm?")
    (repair,) = helpers.inputs_of(lm, "RepairSQL")
    assert repair["error"] == "no such column: T1.hieght_cm"


# --- rule 4: nearest values ----------------------------------------------------------------------

@pytest.mark.slow
def test_a_literal_the_column_never_holds_gets_the_nearest_stored_values(engine, kb_retriever, helpers):
    script = helpers.Script(GenerateSQL={"sql": WRONG_VALUE}, RepairSQL={"repaired_sql": MARVEL})
    pred, lm = run_on(engine, kb_retriever, script, Settings(), question="How many Marvel heroes are there?")
    (repair,) = helpers.inputs_of(lm, "RepairSQL")
    assert repair["error"].startswith("no such function: nosuchfunc")
    assert "publisher.publisher_name never holds 'Marvel'; its nearest stored values: 'Marvel Comics'" in repair["error"]
    assert pred.sql == MARVEL and pred.rows and pred.rows[0][0] > 100


@pytest.mark.slow
def test_suggest_values_off_gives_the_repairer_the_raw_error(engine, kb_retriever, helpers):
    script = helpers.Script(GenerateSQL={"sql": WRONG_VALUE}, RepairSQL={"repaired_sql": MARVEL})
    pred, lm = run_on(engine, kb_retriever, script, Settings(repair_suggest_values=False),
                      question="How many Marvel heroes are there?")
    (repair,) = helpers.inputs_of(lm, "RepairSQL")
    assert repair["error"] == "no such function: nosuchfunc"


def test_values_are_skipped_silently_without_a_value_index(run, helpers):
    script = helpers.Script(GenerateSQL={"sql": WRONG_VALUE}, RepairSQL={"repaired_sql": MARVEL})
    pred, lm = run(script, Settings(), question="How many Marvel heroes are there?")
    (repair,) = helpers.inputs_of(lm, "RepairSQL")
    assert repair["error"] == "no such function: nosuchfunc"
    assert not steps(pred, "synthesis.schema_repair")


# --- every switch off, and failures --------------------------------------------------------------

def test_all_rules_off_is_todays_loop(run, helpers):
    script = helpers.Script(GenerateSQL={"sql": WRONG_ALIAS}, RepairSQL={"repaired_sql": POWERS})
    pred, lm = run(script, Settings(**OFF), question=QUESTION)
    (repair,) = helpers.inputs_of(lm, "RepairSQL")
    assert repair["error"] == "no such column: T1.power_name"
    assert not steps(pred, "synthesis.schema_repair")
    assert [s["decision"] for s in steps(pred, "synthesis.syntax")] == ["repair", "compiles"]


def test_sql_that_does_not_parse_goes_to_the_repairer_with_the_raw_error(run, engine, helpers):
    broken = "SELECT T1.power_name FROM superhero AS T1 WHERE ("
    script = helpers.Script(GenerateSQL={"sql": broken}, RepairSQL={"repaired_sql": POWERS})
    pred, lm = run(script, Settings(), question=QUESTION)
    (repair,) = helpers.inputs_of(lm, "RepairSQL")
    assert repair["error"] == engine.check(broken) and repair["error"]
    assert pred.sql == POWERS


def test_a_failing_introspection_leaves_the_loop_working(superhero_db, helpers):
    from reflect_sql.db.base import SQLExecutionError
    from reflect_sql.db.sqlite import SQLiteEngine
    from reflect_sql.settings import Settings as Base

    class NoCatalogue(SQLiteEngine):
        def introspect(self, *args, **kwargs):
            raise SQLExecutionError("catalogue unreadable")

    with SQLiteEngine(superhero_db, Base()) as good:
        retriever = helpers.RecordingRetriever(good.introspect())
    with NoCatalogue(superhero_db, Base()) as engine:
        script = helpers.Script(GenerateSQL={"sql": WRONG_ALIAS}, RepairSQL={"repaired_sql": POWERS})
        pred, lm = run_on(engine, retriever, script, Settings())
    (repair,) = helpers.inputs_of(lm, "RepairSQL")
    assert repair["error"] == "no such column: T1.power_name"
    (step,) = steps(pred, "synthesis.schema_repair")
    assert "introspection failed" in step["failure"]
    assert pred.sql == POWERS and len(pred.rows) == 4


def test_a_bug_in_a_rule_is_recorded_and_the_repairer_still_runs(run, helpers, monkeypatch):
    from reflect_sql.programs import schema_repair

    def broken(state):
        raise KeyError("boom")

    broken.setting = "repair_requalify"
    monkeypatch.setattr(schema_repair, "RULES", (broken,))
    script = helpers.Script(GenerateSQL={"sql": WRONG_ALIAS}, RepairSQL={"repaired_sql": POWERS})
    pred, lm = run(script, Settings(), question=QUESTION)
    (repair,) = helpers.inputs_of(lm, "RepairSQL")
    assert repair["error"] == "no such column: T1.power_name"
    (step,) = steps(pred, "synthesis.schema_repair")
    assert "KeyError" in step["failure"] and pred.sql == POWERS


# --- the rules on their own ----------------------------------------------------------------------

def test_what_the_rules_leave_alone(engine):
    """References the schema cannot judge, or that are right, are never rewritten or flagged."""
    from reflect_sql.programs.schema_repair import repair
    from reflect_sql.settings import Settings as Base

    schema = engine.introspect()
    fine = [
        "SELECT T1.rowid, COUNT(*) AS n FROM superhero AS T1 GROUP BY T1.rowid ORDER BY n",  # implicit column, alias
        "SELECT x.n FROM (SELECT COUNT(*) AS n FROM superhero) AS x",  # a derived table's column
        "WITH h AS (SELECT id AS hid FROM superhero) SELECT hid FROM h",  # a CTE's column
        "SELECT T1.id FROM superhero AS T1 WHERE EXISTS (SELECT 1 FROM hero_power AS T2 WHERE T2.hero_id = T1.id)",
    ]
    for sql in fine:
        out = repair(sql, "some other error", schema, Base(), "sqlite")
        assert out is not None and not out.rewrites and not out.notes, (sql, out)
    # In a correlated subquery, the inner scope's table is the one that has the column.
    sql = "SELECT T1.id FROM superhero AS T1 WHERE EXISTS (SELECT 1 FROM hero_power AS T2 WHERE T2.hero_id = T1.id AND T1.power_id = 3)"
    out = repair(sql, engine.check(sql), schema, Base(), "sqlite")
    assert out.rewrites == ["T1.power_id -> T2.power_id"] and engine.check(out.sql) is None
    assert repair(sql, "x", schema, Base(**OFF), "sqlite") is None


def test_an_extra_sample_on_the_wrong_alias_is_requalified_and_joins_the_pool(run, helpers):
    alias_only = WRONG_ALIAS.replace("WHERE T1.superhero_name = '3-D Man'", "WHERE T1.id = 1")
    script = helpers.Script(GenerateSQL=[{"sql": POWERS}, {"sql": alias_only}])
    pred, lm = run(script, Settings(n_candidates=2, selection="vote"), question=QUESTION)
    assert "RepairSQL" not in helpers.calls_by_signature(lm)
    (sample,) = steps(pred, "synthesis.sample")
    assert sample["decision"] == "compiles: added to the pool"
    assert sample["rewrite"]["sql"] == alias_only.replace("T1.power_name", "T3.power_name")
    (selection,) = steps(pred, "selection")
    assert selection["scores"]["pool"] == 2


def test_of_several_owners_outside_the_query_the_one_the_alias_means_is_joined(tmp_path):
    """T1.name on orders: customers and menu_items both have a name. The model's alias dish_name
    says which; the KB's meaning lookup (here a stand-in) ranks menu_items.name first for it."""
    from reflect_sql.programs import schema_repair

    sql = ("SELECT T1.name AS dish_name, COUNT(*) FROM orders AS T1 JOIN order_items AS T2 ON T2.order_id = T1.id "
           "GROUP BY T1.name ORDER BY T1.name")
    asked = []

    def meaning(text):
        asked.append(text)
        return [("menu_items", "name", 0.52), ("customers", "name", 0.31)] if "dish" in text else []

    with hand_built(tmp_path, """
            CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT);
            CREATE TABLE menu_items (id INTEGER PRIMARY KEY, name TEXT);
            CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER REFERENCES customers(id));
            CREATE TABLE order_items (id INTEGER PRIMARY KEY, order_id INTEGER REFERENCES orders(id),
                                      menu_item_id INTEGER REFERENCES menu_items(id));
            INSERT INTO customers VALUES (1, 'Ann');
            INSERT INTO menu_items VALUES (10, 'pho'), (20, 'banh mi');
            INSERT INTO orders VALUES (1, 1);
            INSERT INTO order_items VALUES (1, 1, 10), (2, 1, 10), (3, 1, 20);
        """) as engine:
        def repair(sql, meaning):
            return schema_repair.repair(sql, engine.check(sql), engine.introspect(), Settings(), engine.dialect,
                                        meaning=meaning)

        outcome = repair(sql, meaning)
        assert set(asked) == {"dish name"}
        assert "joined order_items -> menu_items" in outcome.rewrites
        assert "T1.name AS dish_name: the alias means menu_items.name" in outcome.rewrites
        assert engine.execute(outcome.sql).rows == [("banh mi", 1), ("pho", 2)]
        # No alias, or an alias that means no owner's column: the choice stays the repairer's.
        for unclear in (sql.replace(" AS dish_name", ""), sql.replace("dish_name", "label")):
            outcome = repair(unclear, meaning)
            assert not any(r.startswith("joined") for r in outcome.rewrites)
            assert "customers" in outcome.feedback() and "menu_items" in outcome.feedback()
