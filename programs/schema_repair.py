"""Schema-grounded repair: deterministic fixes and hints for SQL that fails to compile, worked out on
the sqlglot AST against the whole database schema, before any LM repair call.

Small models mostly fail on names, not on logic: ``T1.dish_name`` where dish_name belongs to T2, a
column of a table retrieval never showed them, a misspelt name, a value spelled otherwise than it is
stored. The engine reports only its first error, and a repairer shown only that error tends to hand
back the same SQL. These rules look at every reference at once, in order, as sqlglot's optimizer
rules do, each switched by its own setting:

- ``requalify_columns`` (``repair_requalify``): a column on a table or alias that lacks it moves to
  the one table of the query that has it; the SQL is rewritten and compiled again, no LM call;
- ``add_joins`` (``repair_add_joins``): a column only one table outside the query has, reached by
  one chain of single foreign keys: the chain is joined in and the column qualified, no LM call;
- ``pull_in_tables`` (``repair_pull_tables``): a column only a table outside the query has: the
  feedback names that table and its foreign-key join path, and the table joins the schema context;
- ``suggest_names`` (``repair_suggest_names``): an unknown table, or a column no table has: the
  closest names go into the feedback; with a KB, so do the columns whose documents mean the name
  (``dish_name``: menu_items.name, "name of the dish"), and their tables join the context with
  their join paths;
- ``suggest_values`` (``repair_suggest_values``): a string literal compared with a column whose
  indexed values never include it: the nearest stored values (only with a KB value index).
"""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.optimizer.scope import Scope, traverse_scope

from reflect_sql.db.schema import ForeignKey, Schema, Table
from reflect_sql.kb.context import fk_graph, fk_path, path_links
from reflect_sql.kb.text import fold, split_identifier
from reflect_sql.kb.values import ValueIndex, indexable_value
from reflect_sql.settings import Settings

# Columns every table has without declaring them: a reference to one is not misplaced.
IMPLICIT_COLUMNS = {"sqlite": {"rowid", "oid", "_rowid_"},
                    "postgres": {"ctid", "xmin", "xmax", "cmin", "cmax", "tableoid"}}
CLOSE_NAMES = 3
NAME_CUTOFF = 0.6
NEAR_VALUES = 3
VALUE_CUTOFF = 0.5
MAX_NOTES = 8  # a small model's prompt has no room for a long list, and the first few matter most
MAX_OWNERS = 2  # tables named for a column found outside the query
MEANT_COLUMNS = 2
# Cosine similarity of a name's words to a column document (all-MiniLM-L6-v2). On the restaurant
# KB "dish name" found menu_items.name at 0.52, and a nonsense name's best match scored 0.23.
MEANING_CUTOFF = 0.35

MISPLACED = "misplaced"  # qualified with a table or alias of the query that lacks the column, or an unknown alias
OUTSIDE = "outside"  # qualified with a table the query does not use
UNOWNED = "unowned"  # unqualified, and no table in scope has it


@dataclass
class Ref:
    """One column reference, and what the schema says about it."""

    node: exp.Column
    scopes: list[Scope]  # its own scope, then the enclosing ones (a correlated subquery sees them)
    text: str  # as the model wrote it
    table: Table | None = None  # the schema table it resolves to (or, for OUTSIDE, the one it names)
    problem: str | None = None
    handled: bool = False

    @property
    def name(self) -> str:
        return self.node.name


@dataclass
class Repair:
    """What the rules share: the tree they may rewrite, the schema, and what they found so far."""

    tree: exp.Expression
    schema: Schema
    dialect: str
    error: str
    foreign_keys: list[ForeignKey]
    values: ValueIndex | None
    refs: list[Ref]
    query_tables: dict[str, list[str]]  # schema name -> the aliases the query gives it
    unknown_tables: list[str]
    rewrites: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    pull: dict[str, list[str]] = field(default_factory=dict)  # table -> columns, for the context
    fired: list[str] = field(default_factory=list)
    # (text) -> [(table, column, similarity)], best first: the KB's columns that mean ``text``.
    meaning: Callable[[str], list[tuple[str, str, float]]] | None = None
    meanings: dict[str, list[tuple[str, str]]] = field(default_factory=dict)  # text -> its _meant columns

    def has(self, table: Table, column: str) -> bool:
        return table.column(column) is not None or column.lower() in IMPLICIT_COLUMNS.get(self.dialect, ())

    def note(self, rule: str, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)
        if rule not in self.fired:
            self.fired.append(rule)


@dataclass
class Outcome:
    sql: str  # after the rewrites; the input SQL when none applied
    rewrites: list[str]  # "T1.dish_name -> T2.dish_name"
    notes: list[str]  # one line per finding, for the repairer
    pull: dict[str, list[str]]  # tables (and their columns) the schema context should gain
    rules: list[str]  # the rules that did something

    def feedback(self) -> str:
        if not self.notes:
            return ""
        shown = self.notes[:MAX_NOTES]
        more = len(self.notes) - len(shown)
        return "\n".join(["Schema check against the whole database:", *shown]
                         + ([f"- ... and {more} more"] if more > 0 else []))


def rule(setting: str) -> Callable[[Callable[[Repair], None]], Callable[[Repair], None]]:
    def mark(fn: Callable[[Repair], None]) -> Callable[[Repair], None]:
        fn.setting = setting  # type: ignore[attr-defined]
        return fn

    return mark


# --- analysis ----------------------------------------------------------------------------------

def _chain(scope: Scope | None) -> Iterable[Scope]:
    while scope is not None:
        yield scope
        scope = scope.parent


def _sources(scope: Scope) -> dict[str, Any]:
    # SQLite compares names case-insensitively; sqlglot keys sources as written.
    return {k.lower(): v for k, v in scope.sources.items()}


def _alias_of(source: exp.Table) -> exp.Identifier:
    alias = source.args.get("alias")
    return alias.this if alias is not None and alias.this is not None else source.this


def _owners(state: Repair, scope: Scope, column: str) -> tuple[list[tuple[exp.Table, Table]], bool]:
    """The (source, schema table) pairs of ``scope`` that have ``column``, and whether some other
    source might have it too (a derived table selecting it or ``*``, a view, an unknown table)."""
    owners, opaque = [], False
    for source in scope.sources.values():
        if isinstance(source, exp.Table):
            table = state.schema.table(source.name)
            if table is None:
                opaque = True
            elif state.has(table, column):
                owners.append((source, table))
        elif isinstance(source, Scope):
            selects = getattr(source.expression, "named_selects", None) or []
            if column.lower() in {s.lower() for s in selects} or any(
                    isinstance(e, exp.Star) or (isinstance(e, exp.Column) and e.is_star)
                    for e in getattr(source.expression, "expressions", [])):
                opaque = True
        else:
            opaque = True
    return owners, opaque


def _select_aliases(scope: Scope) -> set[str]:
    return {e.alias.lower() for e in getattr(scope.expression, "expressions", []) if isinstance(e, exp.Alias)}


def _classify(state: Repair, ref: Ref) -> None:
    column, qualifier = ref.name, ref.node.table
    if qualifier:
        source = next((s for sc in ref.scopes if (s := _sources(sc).get(qualifier.lower())) is not None), None)
        if source is None:
            named = state.schema.table(qualifier)
            if named is not None and named.name not in state.query_tables and state.has(named, column):
                ref.table, ref.problem = named, OUTSIDE
            else:
                ref.problem = MISPLACED
        elif isinstance(source, exp.Table):
            table = state.schema.table(source.name)
            if table is not None:
                ref.table = table
                ref.problem = None if state.has(table, column) else MISPLACED
        return  # a derived table's columns are its own business
    for scope in ref.scopes:
        owners, opaque = _owners(state, scope, column)
        if len(owners) == 1 and not opaque:
            ref.table = owners[0][1]
        if owners or opaque or column.lower() in _select_aliases(scope):
            return
    ref.problem = UNOWNED


def _analyse(tree: exp.Expression, schema: Schema, dialect: str, error: str, foreign_keys: list[ForeignKey],
             values: ValueIndex | None) -> Repair:
    ctes = {cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE)}
    query_tables: dict[str, list[str]] = {}
    unknown: list[str] = []
    for node in tree.find_all(exp.Table):
        if not node.name or node.name.lower() in ctes:
            continue
        table = schema.table(node.name)
        if table is not None:
            aliases = query_tables.setdefault(table.name, [])
            if node.alias and node.alias not in aliases:
                aliases.append(node.alias)
        # A view is not in the schema either: only a table the engine's error names is unknown.
        elif node.name not in unknown and re.search(rf"(?<!\w){re.escape(node.name)}(?!\w)", error, re.I):
            unknown.append(node.name)
    state = Repair(tree, schema, dialect, error, foreign_keys, values, [], query_tables, unknown)
    seen: set[int] = set()
    for scope in traverse_scope(tree):  # innermost scopes first: a column belongs to the first that lists it
        for column in scope.columns:
            if id(column) in seen or column.is_star or not column.name:
                continue
            seen.add(id(column))
            ref = Ref(column, list(_chain(scope)), column.sql(dialect=dialect))
            _classify(state, ref)
            state.refs.append(ref)
    return state


def _open(state: Repair) -> list[Ref]:
    return [r for r in state.refs if r.problem is not None and not r.handled]


def _query_has(state: Repair, column: str) -> bool:
    return any(state.has(state.schema.table(name), column) for name in state.query_tables)


# --- rules -------------------------------------------------------------------------------------

@rule("repair_requalify")
def requalify_columns(state: Repair) -> None:
    for ref in _open(state):
        if ref.problem != MISPLACED:
            continue
        for scope in ref.scopes:  # the nearest scope that has the column decides, as SQL resolves it
            owners, opaque = _owners(state, scope, ref.name)
            if owners:
                break
        if len(owners) == 1 and not opaque:
            source, table = owners[0]
            ref.node.set("table", _alias_of(source).copy())
            ref.node.set("db", None)
            ref.node.set("catalog", None)
            after = ref.node.sql(dialect=state.dialect)
            if f"{ref.text} -> {after}" not in state.rewrites:
                state.rewrites.append(f"{ref.text} -> {after}")
            ref.table, ref.problem, ref.handled = table, None, True
            if "requalify_columns" not in state.fired:
                state.fired.append("requalify_columns")
        elif len(owners) > 1:
            # Which one was meant is a question about meaning, not names: the repairer decides.
            where = ", ".join(f"{_alias_of(s).name} ({t.name})" for s, t in owners)
            state.note("requalify_columns", f"- {ref.text}: that table has no column {ref.name}; "
                                            f"{where} each have one: qualify it with the right one")
            ref.handled = True


def _scope_tables(state: Repair, scope: Scope) -> dict[str, list[exp.Table]]:
    """Schema table name -> the sources of ``scope`` that are that table."""
    out: dict[str, list[exp.Table]] = {}
    for source in scope.sources.values():
        if isinstance(source, exp.Table) and (table := state.schema.table(source.name)) is not None:
            out.setdefault(table.name, []).append(source)
    return out


def _qualify_bare_columns(state: Repair, scope: Scope, present: dict[str, list[exp.Table]]) -> None:
    """Qualify the scope's unqualified columns with the one source that has each: a joined table
    may have a column of the same name (``id``), which would make them ambiguous."""
    named = _select_aliases(scope)
    for column in scope.columns:
        if column.table or column.is_star or not column.name or column.name.lower() in named:
            continue
        owners = [src for tables in present.values() for src in tables
                  if state.has(state.schema.table(src.name), column.name)]
        if len(owners) == 1:
            column.set("table", _alias_of(owners[0]).copy())


@rule("repair_add_joins")
def add_joins(state: Repair) -> None:
    """A column that only one table outside the query has, reachable from the column's own SELECT by
    one chain of single foreign keys: join that chain in and qualify the column with its table.
    Measured: the embedded 1.5B, told the join path in words, handed back the same SQL. Anything
    less clear-cut (two owners, two links between a pair of tables, a table the query uses twice
    where the chain leaves it) is left to ``pull_in_tables``, which explains it to the repairer instead."""
    graph = fk_graph(state.foreign_keys)
    added: dict[int, dict[str, str]] = {}  # id(scope) -> table -> alias, for the tables this rule joined in
    refs = _open(state)
    for ref in refs:
        if ref.problem not in (OUTSIDE, MISPLACED, UNOWNED) or _query_has(state, ref.name):
            continue
        owners = [ref.table] if ref.problem == OUTSIDE else [
            t for t in state.schema.tables if t.name not in state.query_tables and state.has(t, ref.name)]
        by_alias = len(owners) > 1
        if by_alias:
            owners = _named_by_alias(state, ref, refs, owners)
        scope = ref.scopes[0]
        select = scope.expression
        if len(owners) != 1 or not isinstance(select, exp.Select):
            continue
        target = owners[0]
        present = _scope_tables(state, scope)
        joined = added.setdefault(id(scope), {})
        if target.name not in joined:
            # A column written on a table of the query is reached from that table: the model joined the
            # rest of the query on it, and a path from elsewhere would leave it unjoined.
            start: list[str] = list(present)
            qualifier = ref.node.table
            if qualifier and isinstance(src := _sources(scope).get(qualifier.lower()), exp.Table) and \
                    (named := state.schema.table(src.name)) is not None and named.name in present:
                start = [named.name]
            path = fk_path(graph, start, target.name)
            # A table on the way that the query already has, or that this rule joined for an earlier
            # reference, is joined through, not joined again: a second copy of it multiplies the rows
            # (a 1.5B's orders -> order_items query summed every line once per line of its order).
            on_the_way = [i for i, table in enumerate(path[:-1]) if table in present or table in joined]
            path = path[on_the_way[-1]:] if on_the_way else path
            links = path_links(state.foreign_keys, path)
            if len(path) < 2 or any(len(hop) != 1 for hop in links) or \
                    (path[0] not in joined and len(present.get(path[0], [])) != 1):
                continue
            _qualify_bare_columns(state, scope, present)
            aliases = {path[0]: joined.get(path[0]) or _alias_of(present[path[0]][0]).name}
            taken = {k.lower() for k in scope.sources} | {alias.lower() for alias in joined.values()}
            for (_, table), (fk,) in zip(zip(path, path[1:]), links):
                alias = table if table.lower() not in taken else f"{table}_{len(taken)}"
                taken.add(alias.lower())
                aliases[table] = joined[table] = alias
                on = exp.and_(*(exp.EQ(this=exp.column(a, table=aliases[fk.table]),
                                       expression=exp.column(b, table=aliases[fk.ref_table]))
                                for a, b in zip(fk.columns, fk.ref_columns)))
                select.join(exp.table_(table, alias=alias), on=on, join_type="inner", copy=False)
            state.rewrites.append(f"joined {' -> '.join(path)}")
        column = target.column(ref.name).name if target.column(ref.name) else ref.name
        if by_alias and isinstance(ref.node.parent, exp.Alias):
            state.rewrites.append(f"{ref.text} AS {ref.node.parent.alias}: the alias means {target.name}.{column}")
        ref.node.set("table", exp.to_identifier(joined[target.name]))
        ref.node.set("db", None)
        ref.node.set("catalog", None)
        state.rewrites.append(f"{ref.text} -> {ref.node.sql(dialect=state.dialect)}")
        if column not in (pulled := state.pull.setdefault(target.name, [])):
            pulled.append(column)
        ref.table, ref.problem, ref.handled = target, None, True
        if "add_joins" not in state.fired:
            state.fired.append("add_joins")


def _named_by_alias(state: Repair, ref: Ref, refs: list[Ref], owners: list[Table]) -> list[Table]:
    """Of several tables outside the query that have the column, the one its alias names: the
    1.5B wrote ``T1.name AS dish_name`` on orders, and of the tables with a ``name`` the KB's column
    document that means "dish name" most is menu_items'. The same reference elsewhere in its SELECT
    (``GROUP BY T1.name``) follows its aliased twin. The owners stay as they are when there is no
    alias or no KB, or when the column the alias means most is not one of theirs."""
    twins = [r for r in refs if r.scopes[0] is ref.scopes[0] and r.text.lower() == ref.text.lower()]  # ref too
    aliases = [r.node.parent.alias for r in twins if isinstance(r.node.parent, exp.Alias) and r.node.parent.alias]
    if not aliases:
        return owners
    meant = _meant(state, aliases[0])
    if not meant or meant[0][1].lower() != ref.name.lower():
        return owners
    return [t for t in owners if t.name == meant[0][0]] or owners


@rule("repair_pull_tables")
def pull_in_tables(state: Repair) -> None:
    graph = fk_graph(state.foreign_keys)
    for ref in _open(state):
        if ref.problem == OUTSIDE:
            owners = [ref.table]
        elif _query_has(state, ref.name):
            continue  # a table of the query has it: a question of qualifying, not of missing schema
        else:
            owners = [t for t in state.schema.tables if t.name not in state.query_tables and state.has(t, ref.name)]
        if not owners:
            continue
        paths = {t.name: fk_path(graph, state.query_tables, t.name) for t in owners}
        owners.sort(key=lambda t: (len(paths[t.name]) if paths[t.name] else len(graph) + 1, t.name))
        owners = owners[:MAX_OWNERS]
        for table in owners:
            column = table.column(ref.name).name if table.column(ref.name) else ref.name
            state.pull.setdefault(table.name, [])
            if column not in state.pull[table.name]:
                state.pull[table.name].append(column)
        lines = [f"- {ref.text}: no table in the query has a column {ref.name}; "
                 + " and ".join(f"table {t.name}" for t in owners) + (" has it." if len(owners) == 1 else " have it.")]
        for table in owners:
            lines.append(f"  {_join_text(state, paths[table.name], table.name)}")
        state.note("pull_in_tables", "\n".join(lines))
        ref.handled = True


def _join_text(state: Repair, path: list[str], target: str) -> str:
    if len(path) < 2:
        return f"No foreign key links {target} to the tables of the query: join it on matching key columns."
    edges = [" or ".join(fk.render() for fk in links)
             for links in path_links(state.foreign_keys, path)]
    start, aliases = path[0], state.query_tables.get(path[0]) or []
    alias = f" ({start} is {aliases[0]} in the query)" if aliases else ""
    return f"Join {target} through {' -> '.join(path)}: {'; '.join(edges)}{alias}."


def _closeness(wanted: str, name: str) -> float:
    wanted, name = wanted.lower(), name.lower()
    score = difflib.SequenceMatcher(None, wanted, name, autojunk=False).ratio()
    # "name" and "superhero_name": a word of one inside the other is as telling as a typo.
    words_a = {w for w in split_identifier(wanted) if len(w) > 2 and w != "id"}
    words_b = {w for w in split_identifier(name) if len(w) > 2 and w != "id"}
    if words_a and words_b and (words_a <= words_b or words_b <= words_a):
        score = max(score, 0.65)
    return score


def _closest(wanted: str, names: list[tuple[str, str]], limit: int = CLOSE_NAMES) -> list[str]:
    """The shown labels of the ``names`` (label, name) closest to ``wanted``, best first (stable)."""
    scored = [(_closeness(wanted, name), i, label) for i, (label, name) in enumerate(names)]
    return [label for score, _, label in sorted(scored, key=lambda x: (-x[0], x[1])) if score >= NAME_CUTOFF][:limit]


@rule("repair_suggest_names")
def suggest_names(state: Repair) -> None:
    tables = [(t.name, t.name) for t in state.schema.tables]
    for name in state.unknown_tables:
        close = _closest(name, tables)
        state.note("suggest_names", f"- table {name} does not exist"
                   + (f"; the closest tables: {', '.join(close)}" if close else ""))
    for ref in _open(state):
        if any(state.has(t, ref.name) for t in state.schema.tables):
            continue  # it has an owner: the other rules' business
        # The query's own tables first, under the names the query gives them.
        columns: list[tuple[str, str]] = []
        for table_name, aliases in state.query_tables.items():
            label = aliases[0] if aliases else table_name
            columns += [(f"{label}.{c.name}" + (f" ({table_name})" if aliases else ""), c.name)
                        for c in state.schema.table(table_name).columns]
        columns += [(f"{t.name}.{c.name}", c.name) for t in state.schema.tables if t.name not in state.query_tables
                    for c in t.columns]
        close = _closest(ref.name, columns)
        meant = _meant(state, ref.name)
        meant_labels = [f"{t}.{c}" for t, c in meant if f"{t}.{c}" not in close]
        # Small models write strings in double quotes, which name columns (PostgreSQL refuses them).
        quoted = not ref.node.table and ref.node.this.args.get("quoted")
        lines = [f"- {ref.text}: no table has a column {ref.name}"
                 + (f"; the closest columns: {', '.join(close)}" if close else "")
                 + (f"; by meaning: {', '.join(meant_labels)}" if meant_labels else "")
                 + ("; if it is a string, write it in single quotes" if quoted else "")]
        graph = fk_graph(state.foreign_keys)
        for table, column in meant:
            if table in state.query_tables:
                continue
            state.pull.setdefault(table, [])
            if column not in state.pull[table]:
                state.pull[table].append(column)
            lines.append(f"  {_join_text(state, fk_path(graph, state.query_tables, table), table)}")
        state.note("suggest_names", "\n".join(lines))
        ref.handled = True


def _meant(state: Repair, name: str) -> list[tuple[str, str]]:
    """The KB's columns that mean ``name`` (its words, "dish name"), best first; [] without a KB."""
    if state.meaning is None or not (text := " ".join(split_identifier(name))):
        return []
    if text not in state.meanings:  # one embedding per text, however many references ask
        state.meanings[text] = [(table, column) for table, column, sim in state.meaning(text)[:MEANT_COLUMNS]
                                if sim >= MEANING_CUTOFF]
    return state.meanings[text]


def _comparisons(tree: exp.Expression) -> Iterable[tuple[exp.Column, str, str]]:
    """(column, string literal, operator) for ``col = 'x'``, ``'x' = col``, ``col IN ('x', ...)``
    and ``col LIKE 'x'`` without wildcards."""
    for node in tree.find_all(exp.EQ, exp.In, exp.Like):
        if isinstance(node, exp.In):
            if isinstance(node.this, exp.Column):
                for item in node.expressions:
                    if isinstance(item, exp.Literal) and item.is_string:
                        yield node.this, item.this, "IN"
            continue
        left, right = node.this, node.expression
        if isinstance(right, exp.Column) and not isinstance(left, exp.Column):
            left, right = right, left
        if isinstance(left, exp.Column) and isinstance(right, exp.Literal) and right.is_string:
            like = isinstance(node, exp.Like)
            if not (like and ("%" in right.this or "_" in right.this)):
                yield left, right.this, "LIKE" if like else "="


def _nearest_values(value: str, stored: list[tuple[str, str]], limit: int = NEAR_VALUES) -> list[str]:
    target = fold(value)
    matcher = difflib.SequenceMatcher(autojunk=False)
    matcher.set_seq2(target)
    scored = []
    for original, norm in stored:
        if norm == target:
            score = 1.0  # the same words, spelled (cased, accented) otherwise
        else:
            matcher.set_seq1(norm)
            score = matcher.ratio() if matcher.real_quick_ratio() >= VALUE_CUTOFF and matcher.quick_ratio() >= VALUE_CUTOFF else 0.0
            if len(target) >= 3 and len(norm) >= 3 and (target in norm or norm in target):
                score = max(score, 0.75)  # "Marvel" for "Marvel Comics"
        if score >= VALUE_CUTOFF:
            scored.append((score, original))
    scored.sort(key=lambda x: (-x[0], x[1]))
    return [v for _, v in scored[:limit]]


def _quoted(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


@rule("repair_suggest_values")
def suggest_values(state: Repair) -> None:
    if not isinstance(state.values, ValueIndex):
        return  # no KB: nothing says which values a column holds
    resolved = {id(r.node): r for r in state.refs if r.table is not None and r.problem is None}
    for node, literal, op in _comparisons(state.tree):
        ref = resolved.get(id(node))
        if ref is None or not indexable_value(literal):
            continue  # unresolved column, or a literal the index never holds (a date, a number, long text)
        column = ref.table.column(ref.name)
        if column is None:
            continue
        stored = state.values.column_values(ref.table.name, column.name)
        if not stored or not state.values.complete(ref.table.name, column.name):
            continue  # not indexed, or maybe not every value is: silence beats a false "never occurs"
        # LIKE ignores ASCII case in both engines' defaults (ILIKE aside); = and IN compare exactly.
        same = (lambda v: v.lower() == literal.lower()) if op == "LIKE" else (lambda v: v == literal)
        if any(same(v) for v, _ in stored):
            continue
        near = _nearest_values(literal, stored)
        elsewhere = [f"{t}.{c}" for t, c, _ in state.values.columns_holding(literal)
                     if (t.lower(), c.lower()) != (ref.table.name.lower(), column.name.lower())][:MAX_OWNERS]
        shown = f"({_quoted(literal)}, ...)" if op == "IN" else _quoted(literal)
        text = f"- {ref.text} {op} {shown}: {ref.table.name}.{column.name} never holds {_quoted(literal)}"
        if near:
            text += f"; its nearest stored values: {', '.join(map(_quoted, near))}"
        if elsewhere:
            text += f"; {_quoted(literal)} is a value of {' and '.join(elsewhere)}"
        state.note("suggest_values", text)


RULES = (requalify_columns, add_joins, pull_in_tables, suggest_names, suggest_values)
SETTINGS = tuple(r.setting for r in RULES)


def enabled(settings: Settings) -> bool:
    return any(getattr(settings, key) for key in SETTINGS)


def repair(sql: str, error: str, schema: Schema, settings: Settings, dialect: str,
           foreign_keys: list[ForeignKey] | None = None, values: ValueIndex | None = None,
           meaning: Callable[[str], list[tuple[str, str, float]]] | None = None) -> Outcome | None:
    """Run the enabled rules on ``sql``, which failed to compile with ``error``.

    ``foreign_keys`` default to the schema's (a KB's may add those of a tables.json); ``meaning``
    (a KB's ``columns_meaning``) finds the columns a name that exists nowhere meant. Returns None
    when no rule is enabled or the SQL is not one statement sqlglot can scope: the engine's error is
    then all the repairer gets.
    """
    rules = [r for r in RULES if getattr(settings, r.setting)]
    if not rules:
        return None
    try:
        trees = [t for t in sqlglot.parse(sql, read=dialect or None) if t is not None]
        if len(trees) != 1:
            return None
        state = _analyse(trees[0], schema, dialect, error,
                         list(foreign_keys if foreign_keys is not None else schema.foreign_keys), values)
        state.meaning = meaning
    except (SqlglotError, RecursionError):
        return None
    for apply in rules:
        apply(state)
    rewritten = state.tree.sql(dialect=dialect or None) if state.rewrites else sql
    return Outcome(rewritten, state.rewrites, state.notes, state.pull, state.fired)
