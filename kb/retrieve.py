"""Two-step retrieval (paper section 3): tables, then columns within them, plus join paths, values
and similar verified examples.

Every table and column is scored by the cosine similarity of the question to its document (the
paper's eq. 1), raised by lexical evidence: the question names it (words stemmed, compound names
split, "oldest" read as asking for an age), or quotes a value it holds (the value index), or a
similar verified example used it.

1. Tables: of the top ``k``, the best is kept, and each other one if its score is close to the
   best (``retrieval_table_margin``) or the question gives direct evidence for it (names the table, names one
   of its columns, quotes one of its values). Then the tables on FK paths needed to join the kept
   ones are added (bridges), whatever k. A table the question or its evidence references
   explicitly, as ``table.column`` or by an identifier only it has (a table name, or a column name
   with an underscore that no other table uses), is kept too, whatever k
   (``keep_referenced_tables``): such a reference is not a guess, and a five-table join asked
   about with k = 4 otherwise loses one of them.
2. Columns: in each kept table, the key columns joining it to the other kept tables are always
   kept (and the primary key of a lone table); of the rest, up to ``m`` by score, each needing
   ``retrieval_column_floor``: cosine similarity alone rarely reaches it, a name or value match does. A
   table's label column ("name", "title") counts as named when the question names the table.

Widening k and m (the retrieval loop's second lever) is a parameter: beyond the settings' k_tables
and m_columns, each growth step also loosens the margin and the floor, so widening always admits
more context even for a question that gives no new evidence.

Without evidence thresholds, every table of a small database with its join keys would pass
(Spider's keys alone are 12-44% of their columns); they are what keeps prompts small.

Pruning is by budget (``context_budget_tokens``), not by habit: a database whose whole schema fits
the budget is passed whole, and else the selected tables with every column when they fit. Only
beyond the budget do k and m prune, and then the lowest-scored columns go until the context fits
(key and join columns stay). ``SchemaContext.pruned`` says which applied.
"""
from __future__ import annotations

import bisect
import dataclasses
import functools
import heapq
import itertools
import re
import unicodedata
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable, Sequence

from reflect_sql.db.schema import ForeignKey
from reflect_sql.kb.context import (TABLES_AND_COLUMNS, TABLES_ONLY, WHOLE_DATABASE, ContextColumn, ContextTable,
                                    ExampleHit, SchemaContext, estimated_tokens, fk_graph, fk_path)
from reflect_sql.kb.documents import GLOBAL, collection_for_table
from reflect_sql.kb.model import ColumnEntry, KnowledgeBase, TableEntry
from reflect_sql.kb.store import open_store
from reflect_sql.kb.text import ATTRIBUTES_OF, STOPWORDS, fold, places_in_time, split_identifier, stem, words
from reflect_sql.kb.values import VALUES_FILE, ValueIndex
from reflect_sql.kb.versions import KBDir
from reflect_sql.settings import Settings


@dataclass(frozen=True)
class Weights:
    """How lexical, value and example evidence add to cosine similarity: a view of the settings'
    ``retrieval_*`` weights (documented there), read once per retriever."""

    table_name: float
    table_column: float
    table_value: float
    column_name: float
    column_value: float
    label: float
    example: float
    example_min_similarity: float
    table_margin: float
    column_floor: float
    strong_table_name: float
    strong_column_name: float
    strong_value: float
    margin_per_step: float
    floor_per_step: float
    examples_shown: int
    example_show_similarity: float

    @classmethod
    def of(cls, settings: Settings) -> "Weights":
        return cls(**settings.retrieval_weights)


# A column the question neither names nor holds a value of: no name coverage, nothing shared
# with other tables (specificity 1), no value match.
NO_EVIDENCE = (0.0, 1.0, 0.0)
# How well a word the question implies ("oldest" -> age, "in May" -> a date column) or spells
# with another suffix matches a name: less than the word itself.
IMPLIED_MATCH = 0.8
_TEMPORAL_TYPE = re.compile(r"date|time", re.IGNORECASE)
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# table.column, each part optionally quoted as SQL writes it ("orders"."id", `orders`.`id`, [orders].[id]).
# Not inside an e-mail address or a dotted chain (a.b.c, file.tar.gz).
_QUALIFIED = re.compile(r'(?<![\w.@])["`\[]?([A-Za-z_][A-Za-z0-9_]*)["`\]]?\.["`\[]?([A-Za-z_][A-Za-z0-9_]*)["`\]]?(?![\w.@])')
# A quoted value ('john.doe@x.com', 'IN_PROGRESS') names no schema object; an apostrophe inside a
# word ("Women's") opens no literal.
_LITERAL = re.compile(r"(?<!\w)'[^']*'(?!\w)")


# Names repeat across tables and questions ("name", "id", ...), and a question scores hundreds of
# them: splitting each name once keeps retrieval cheap on schemas of thousands of columns.
_NAME_CACHE = 1 << 17


@lru_cache(maxsize=_NAME_CACHE)
def _tokens(name: str) -> tuple[str, ...]:
    return tuple(split_identifier(name))


@lru_cache(maxsize=_NAME_CACHE)
def _natural_tokens(natural: str) -> tuple[str, ...]:
    return tuple(fold(natural).split()) if natural else ()


@lru_cache(maxsize=_NAME_CACHE)
def _stem(word: str) -> str:
    return stem(word)


@lru_cache(maxsize=_NAME_CACHE)
def _name_words(name: str, natural: str = "") -> frozenset[str]:
    return frozenset(t for t in _tokens(name) + _natural_tokens(natural) if t not in STOPWORDS and t not in {"id", "no"})


def _shared_prefix(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _accented_words(text: str) -> str:
    return " " + " ".join(re.findall(r"\w+", unicodedata.normalize("NFC", text).casefold())) + " "


def _mentioner(text: str) -> Callable[[str], bool]:
    """Whether ``text`` uses a glossary word, as whole words and ignoring case; ``text`` is read
    once for all the words asked about. A word written with accents must match them: in Vietnamese
    they tell words apart ("lâu", long, is not "lẩu", hotpot). One written without them matches
    either way ("pho" in "phở bò")."""
    folded, accented = f" {fold(text)} ", _accented_words(text)
    return lambda word: (f" {fold(word)} " in folded) if word.isascii() else (_accented_words(word) in accented)


def _mentions(text: str, word: str) -> bool:
    return _mentioner(text)(word)


def temporal(column: ColumnEntry) -> bool:
    """A date or time column: by its declared type, or by its values (the KB's range of dates)."""
    if _TEMPORAL_TYPE.search(column.type or ""):
        return True
    return len(column.value_range) == 2 and all(isinstance(v, str) for v in column.value_range)


class _Question:
    """The query's words, folded and stemmed, for lexical matching."""

    def __init__(self, text: str):
        self.text = text
        folded = words(text)
        self.stems = {stem(w) for w in folded}
        # Attributes asked about without being named: "oldest" asks for an age.
        self.implied = {a for w in folded for a in ATTRIBUTES_OF.get(w, ())} - self.stems
        # Words long enough to be found inside a compound identifier ("countrylanguage").
        self.pieces = {w for w in folded if len(w) >= 4 and w not in STOPWORDS} | {
            stem(w) for w in folded if len(stem(w)) >= 4 and w not in STOPWORDS}
        self.identifiers = {m.lower() for m in _IDENT.findall(text)}
        self.folded = " " + " ".join(stem(w) for w in fold(text).split()) + " "
        # One question scores many names, and names share their words: each is matched once.
        self._token_matches: dict[str, float] = {}
        self._coverages: dict[tuple[str, str], float] = {}
        self.specificity: dict[tuple[str, str], float] = {}  # filled by the retriever, per name

    def token_match(self, token: str) -> float:
        """1 when the question has the word; for a compound word, the share of it the question spells."""
        found = self._token_matches.get(token)
        if found is None:
            found = self._token_matches[token] = self._token_match(token)
        return found

    def _token_match(self, token: str) -> float:
        s = _stem(token)
        if s in self.stems:
            return 1.0
        if s in self.implied:
            return IMPLIED_MATCH
        # Same word, other suffix: "directors" / "directed_by", "populace" / "population".
        if len(s) >= 5 and any(_shared_prefix(s, q) >= max(5, 0.75 * min(len(s), len(q))) for q in self.stems):
            return IMPLIED_MATCH
        if len(token) < 7:
            return 0.0
        covered = [False] * len(token)
        for piece in self.pieces:
            start = token.find(piece)
            while start >= 0:
                covered[start:start + len(piece)] = [True] * len(piece)
                start = token.find(piece, start + 1)
        share = sum(covered) / len(token)
        return share if share >= 0.5 else 0.0

    def name_coverage(self, name: str, natural: str = "") -> float:
        """How much of a table/column name the question mentions, 0..1; 1 for a verbatim identifier."""
        found = self._coverages.get((name, natural))
        if found is None:
            found = self._coverages[(name, natural)] = self._name_coverage(name, natural)
        return found

    def _name_coverage(self, name: str, natural: str) -> float:
        if name.lower() in self.identifiers and ("_" in name or len(_tokens(name)) > 1):
            return 1.0
        best = 0.0
        for tokens in (_tokens(name), _natural_tokens(natural)):
            content = [t for t in tokens if t not in STOPWORDS and t not in {"id", "no"}]
            if not content:
                continue
            covered = sum(self.token_match(t) for t in content) / len(content)
            if covered >= 1.0 and len(content) > 1 and f" {' '.join(_stem(t) for t in content)} " not in self.folded:
                covered = 0.9  # every word, but not as one phrase
            best = max(best, covered)
        return best


_ColumnName = tuple[str, str]  # a column's (name, natural name): what its lexical evidence depends on


@dataclass
class _Evidence:
    """What one question's words and values say of the tables and columns they touch. A table or
    column absent from every map has no evidence (``NO_EVIDENCE``)."""

    question: _Question
    specific: Callable[[_ColumnName], float]  # the retriever's specificity of a name for this question
    names: set[_ColumnName]  # the column names the question's words or identifiers matched
    holding: dict[str, set[str]]  # table -> its columns holding a value the question mentions
    value_of: dict[tuple[str, str], float]  # (table, column), lower-case -> value match
    named: dict[str, float]  # table -> share of its name the question spells
    best_name: dict[str, float]  # table -> its best column-name match times specificity
    best_value: dict[str, float]  # table -> its best value match

    def has(self, table: str, column: ColumnEntry) -> bool:
        return (column.name, column.natural_name) in self.names or column.name in self.holding.get(table, ())

    def of(self, table: TableEntry) -> dict[str, tuple[float, float, float]]:
        """(name coverage, specificity, value match) of each of ``table``'s columns with evidence."""
        q, lower = self.question, table.name.lower()
        return {c.name: (q.name_coverage(c.name, c.natural_name), self.specific((c.name, c.natural_name)),
                         self.value_of.get((lower, c.name.lower()), 0.0))
                for c in table.columns if self.has(table.name, c)}


class Retriever:
    """Retrieval over one KB directory; opens its indexes once and answers many questions."""

    def __init__(self, kb_dir: str | Path, settings: Settings | None = None):
        self.path = Path(kb_dir)
        self.settings = settings or Settings()
        self.weights = Weights.of(self.settings)
        self.kb: KnowledgeBase = KBDir(self.path).load()
        self.store = open_store(self.path)
        self.values = ValueIndex(self.path / VALUES_FILE)
        self._graph = self._fk_graph()
        self._whole_tokens: int | None = None  # the whole database rendered, estimated once
        # Which tables each name word occurs in: "name" in every table says little about which
        # table a question needs; "language" in one says a lot.
        self._word_tables: dict[str, set[str]] = {}
        self._name_tables: dict[str, set[str]] = {}
        # Which column names each name word occurs in, so a question scores only the names it can
        # match, and each name once: on ten thousand columns, hundreds are called "name", and
        # scoring each column per question costs more than the rest of retrieval.
        self._names_of_token: dict[str, list[_ColumnName]] = {}
        self._names_of_lower: dict[str, list[_ColumnName]] = {}
        self._tables_of_name: dict[_ColumnName, list[str]] = {}
        for t in self.kb.tables:
            for c in t.columns:
                self._name_tables.setdefault(c.name.lower(), set()).add(t.name)
                for word in _name_words(c.name, c.natural_name):
                    self._word_tables.setdefault(word, set()).add(t.name)
                key = (c.name, c.natural_name)
                if key not in self._tables_of_name:
                    self._names_of_lower.setdefault(c.name.lower(), []).append(key)
                    for token in set(_tokens(c.name) + _natural_tokens(c.natural_name)):
                        self._names_of_token.setdefault(token, []).append(key)
                self._tables_of_name.setdefault(key, []).append(t.name)
        self._tokens_of_stem: dict[str, list[str]] = {}
        self._tokens_of_prefix: dict[str, list[str]] = {}
        for token in self._names_of_token:
            s = _stem(token)
            self._tokens_of_stem.setdefault(s, []).append(token)
            if len(s) >= 5:
                self._tokens_of_prefix.setdefault(s[:5], []).append(token)
        self._compound_tokens = [t for t in self._names_of_token if len(t) >= 7]
        # Lists: PostgreSQL may hold "Orders" and "orders" both. Where one table must answer, the
        # last of them does, as a dict built over the tables would.
        self._tables_by_lower: dict[str, list[TableEntry]] = {}
        for t in self.kb.tables:
            self._tables_by_lower.setdefault(t.name.lower(), []).append(t)
        self._table_by_lower = {lower: tables[-1] for lower, tables in self._tables_by_lower.items()}
        self._table_by_name = {t.name: t for t in self.kb.tables}  # exact: "Orders" is not "orders"
        self._tables_of_token: dict[str, list[TableEntry]] = {}
        for t in self.kb.tables:
            for token in set(_tokens(t.name) + _natural_tokens(t.natural_name)):
                self._tables_of_token.setdefault(token, []).append(t)
        for token in self._tables_of_token:
            if token not in self._names_of_token:
                s = _stem(token)
                self._tokens_of_stem.setdefault(s, []).append(token)
                if len(s) >= 5:
                    self._tokens_of_prefix.setdefault(s[:5], []).append(token)
                if len(token) >= 7:
                    self._compound_tokens.append(token)
        # All compound tokens in one text, one per line: a question's pieces are then searched with
        # one regex pass, not one search per token (thousands of them on a large schema).
        self._compound_text = "\n".join(self._compound_tokens)
        self._compound_starts = list(itertools.accumulate((len(t) + 1 for t in self._compound_tokens[:-1]), initial=0))

    def _specific(self, q: "_Question", name: "_ColumnName") -> float:
        """1 / (tables sharing the words the question matched in this column name), averaged."""
        # Every table holding a column of this name is in the denominators, so the score depends
        # on the name alone: one score serves the hundreds of "name" columns of a large schema.
        found = q.specificity.get(name)
        if found is None:
            found = q.specificity[name] = self._specificity(q, *name)
        return found

    def _specificity(self, q: "_Question", name: str, natural: str) -> float:
        # Every name the retriever scores is a KB column's, so each of its words is indexed.
        if name.lower() in q.identifiers and ("_" in name or len(_tokens(name)) > 1):
            return 1.0 / len(self._name_tables[name.lower()])
        shares = [1.0 / len(self._word_tables[w]) for w in _name_words(name, natural) if q.token_match(w) > 0]
        return sum(shares) / len(shares) if shares else 1.0

    def _lexical_evidence(self, q: "_Question", value_of: dict[tuple[str, str], float]) -> "_Evidence":
        """What the question's words and values say of the tables and columns they touch. Only the
        names sharing a word with the question, named verbatim in it, or holding a value it
        mentions are scored, each distinct column name once."""
        candidates = {tok for s in q.stems | q.implied for tok in self._tokens_of_stem.get(s, ())}
        candidates.update(tok for s in q.stems if len(s) >= 5 for tok in self._tokens_of_prefix.get(s[:5], ()))
        if q.pieces:
            pieces = re.compile("|".join(re.escape(p) for p in sorted(q.pieces, key=len, reverse=True)))
            # A piece never spans a newline, so each match lies inside the token it starts in.
            candidates.update(self._compound_tokens[bisect.bisect_right(self._compound_starts, m.start()) - 1]
                              for m in pieces.finditer(self._compound_text))
        matched = [tok for tok in candidates if q.token_match(tok) > 0]
        named: dict[str, float] = {}
        for t in {t.name: t for tok in matched for t in self._tables_of_token.get(tok, ())}.values():
            named[t.name] = q.name_coverage(t.name, t.natural_name)
        for ident in q.identifiers:  # a verbatim identifier needs no word in common
            for t in self._tables_by_lower.get(ident, ()):
                named[t.name] = q.name_coverage(t.name, t.natural_name)
        names = {name for tok in matched for name in self._names_of_token.get(tok, ())}
        for ident in q.identifiers:
            names.update(self._names_of_lower.get(ident, ()))
        best_name: dict[str, float] = {}
        for name in names:
            product = q.name_coverage(*name) * self._specific(q, name)
            if product > 0:
                for table in self._tables_of_name[name]:
                    if product > best_name.get(table, 0.0):
                        best_name[table] = product
        # A value the question mentions brings the column holding it (the last of the tables whose
        # names differ only in case, as everywhere a single table must answer).
        holding: dict[str, set[str]] = {}
        for table, column in value_of:
            entry = self._table_by_lower.get(table)
            found = entry.column(column) if entry is not None else None
            if found is not None:
                holding.setdefault(entry.name, set()).add(found.name)
                name = (found.name, found.natural_name)
                product = q.name_coverage(*name) * self._specific(q, name)
                if product > best_name.get(entry.name, 0.0):
                    best_name[entry.name] = product
        evidence = _Evidence(q, functools.partial(self._specific, q), names, holding, value_of, named, best_name, {})
        for (table, column), score in value_of.items():
            for entry in self._tables_by_lower.get(table, ()):
                if any(c.name.lower() == column and evidence.has(entry.name, c) for c in entry.columns):
                    evidence.best_value[entry.name] = max(evidence.best_value.get(entry.name, 0.0), score)
        return evidence

    def close(self) -> None:
        self.values.close()

    def enrich(self, question: str, sql: str, result: object, judgments: dict, evidence: str = ""):
        """Teach this KB one verified answer (``kb.enrich.enrich``): the ``Enricher`` the program calls."""
        # Looked up per call, so a wrapper on kb.enrich.enrich (the reliability suite's ledger) sees it.
        from reflect_sql.kb import enrich as enrichment

        return enrichment.enrich(self.path, question, sql, result, judgments, evidence=evidence)

    def referenced_tables(self, text: str) -> set[str]:
        """Tables ``text`` references explicitly: as ``table.column`` (a column the table has), by
        name when the name is an identifier no English word is (it has an underscore), or by a
        column identifier with an underscore that exactly one table has (``served_at``). Plain words
        ("tables", "name") and column names shared by several tables reference nothing."""
        text = _LITERAL.sub(" ", text)
        by_name = self._table_by_lower
        found: set[str] = set()
        for table, column in _QUALIFIED.findall(text):
            entry = by_name.get(table.lower())
            if entry is not None and entry.column(column) is not None:
                found.add(entry.name)
        for ident in {m.lower() for m in _IDENT.findall(text) if "_" in m.strip("_")}:
            if ident in by_name:
                found.add(by_name[ident].name)
            owners = self._name_tables.get(ident, set())
            if len(owners) == 1:
                found |= owners
        return found

    # --- join graph ------------------------------------------------------------------------

    def _fk_graph(self) -> dict[str, set[str]]:
        known = {t.name for t in self.kb.tables}
        return fk_graph((fk for fk in self.kb.foreign_keys if fk.table in known and fk.ref_table in known), known)

    def _path(self, sources: set[str], target: str) -> list[str]:
        """Shortest FK path from any of ``sources`` to ``target`` (both ends included), or []."""
        return fk_path(self._graph, sources, target)

    def connect(self, chosen: list[str]) -> list[str]:
        """Tables to add so that the chosen ones join: bridges on shortest FK paths, in order."""
        if not chosen:
            return []
        tree = {chosen[0]}
        bridges: list[str] = []
        for table in chosen[1:]:
            if table in tree:
                continue
            path = self._path(tree, table)
            for node in path:
                if node not in tree and node not in chosen:
                    bridges.append(node)
                tree.add(node)
            tree.add(table)
        return bridges

    # --- scoring ---------------------------------------------------------------------------

    def _embed(self, text: str):
        # kb.embedding brings chromadb and, on first use, torch: a retriever never asked loads neither.
        from reflect_sql.kb.embedding import embed_query

        return embed_query(text, self.settings.query_embedding_precision, self.settings.query_embedding_threads)

    @staticmethod
    def _label_column(table: TableEntry) -> str | None:
        """The column that names a row: "name"/"title", else the first "..._name"/"...Title"."""
        words_of = [(c.name, split_identifier(c.name)) for c in table.columns]
        exact = [n for n, w in words_of if w in (["name"], ["title"])]
        ending = [n for n, w in words_of if w and w[-1] in ("name", "title")]
        return (exact or ending or [None])[0]

    def _terms_in(self, mentions: Callable[[str], bool]) -> dict[str, str]:
        return {t: d for t, d in self.kb.terms.items() if mentions(t)}

    def glossary_in(self, text: str) -> dict[str, str]:
        """The glossary's words that ``text`` uses, with what each means: a term's meaning, or the
        value an alias stands for. What a question's rendering in another language must keep."""
        mentions = _mentioner(text)
        found = self._terms_in(mentions)
        for alias, value in self.kb.aliases.items():
            if alias not in found and mentions(alias):
                found[alias] = value
        return found

    def _similarities(self, collection: str, vectors: list) -> dict[str, float]:
        """Each document's cosine similarity to the closest of ``vectors``."""
        merged = self.store.similarities(collection, vectors[0])
        for vector in vectors[1:]:
            for name, sim in self.store.similarities(collection, vector).items():
                merged[name] = max(merged.get(name, sim), sim)
        return merged

    def _examples(self, vectors: list) -> tuple[list, dict[str, float], dict[str, float]]:
        """Nearest verified examples to any of ``vectors``, and what the close ones used (lower-case
        names -> similarity)."""
        if not self.kb.examples:
            return [], {}, {}
        wanted = max(self.weights.examples_shown, 5)
        best: dict[str, tuple] = {}
        for vector in vectors:
            for hit in self.store.example_hits(vector, wanted):
                key = hit[2].get("sql", "")
                if key not in best or hit[1] > best[key][1]:
                    best[key] = hit
        hits = sorted(best.values(), key=lambda h: -h[1])[:wanted]
        by_sql = {e.sql: e for e in self.kb.examples}
        tables: dict[str, float] = {}
        columns: dict[str, float] = {}
        for _, sim, meta in hits:
            example = by_sql.get(meta.get("sql"))
            if example is None or sim < self.weights.example_min_similarity:
                continue
            for t in example.tables:
                tables[t.lower()] = max(tables.get(t.lower(), 0.0), sim)
            for c in example.columns:
                columns[c.lower()] = max(columns.get(c.lower(), 0.0), sim)
        return hits, tables, columns

    def retrieve(self, question: str, k: int | None = None, m: int | None = None, evidence: str = "",
                 renderings: Sequence[str] = ()) -> SchemaContext:
        """The schema context for ``question`` (``evidence``, BIRD's hint, is searched with it).

        ``renderings``: the question said otherwise (its English rendering when it was asked in
        another language). Each is searched too, and the hits merge: a name, value or term found
        in any text counts, and each table's and column's similarity is its best over the texts."""
        w, st = self.weights, self.settings
        k = st.k_tables if k is None else int(k)
        m = st.m_columns if m is None else int(m)
        if k < 1 or m < 0:
            raise ValueError(f"k must be >= 1 and m >= 0 (got k={k}, m={m})")
        margin = w.table_margin + w.margin_per_step * max(0, k - st.k_tables) / max(1, st.k_growth)
        floor = w.column_floor - w.floor_per_step * max(0, m - st.m_columns) / max(1, st.m_growth)
        asked = f"{question} {evidence}".strip()
        renderings = [r for r in renderings if r and r.strip() and r.strip() != question.strip()]
        everything = " ".join([asked, *renderings])
        terms = self._terms_in(_mentioner(everything))
        # A glossary term the question uses is searched with what it means: the meaning names the
        # tables, columns and values in the schema's own language ("chờ món" -> kitchen_tickets,
        # served_at), which the question, asked in another language or in business words, does not.
        meanings = list(terms.values())
        text = " ".join([everything, *meanings])
        q = _Question(text)
        vectors = [self._embed(" ".join([asked, *meanings]))]
        vectors += [self._embed(" ".join([r, evidence, *meanings]).strip()) for r in renderings]
        matches = self.values.lookup(text)
        value_of = {(v.table.lower(), v.column.lower()): v.score for v in matches}
        hits, example_tables, example_columns = self._examples(vectors)

        evidence = self._lexical_evidence(q, value_of)
        in_time = places_in_time(text)  # then a date or time column is implied, named or not

        # Step 1: tables.
        table_sim = self._similarities(GLOBAL, vectors)
        # Most tables of a large schema have nothing of theirs in the question: their score is
        # their similarity, and only the few the evidence touches are scored further.
        scores = {name: table_sim.get(name, 0.0) for name in self._table_by_name}
        named = evidence.named
        touched = named.keys() | evidence.best_name.keys() | evidence.best_value.keys() | {
            t.name for lower in example_tables for t in self._tables_by_lower.get(lower, ())}
        # A strength threshold of 0 is met by every table of the top k, evidence or not.
        every_table_strong = min(w.strong_table_name, w.strong_column_name, w.strong_value) <= 0
        strong = set(scores) if every_table_strong else set()
        for name in touched:
            lower, best_name, best_value = name.lower(), evidence.best_name.get(name, 0.0), evidence.best_value.get(name, 0.0)
            scores[name] = (table_sim.get(name, 0.0) + w.table_name * named.get(name, 0.0) + w.table_column * best_name
                            + w.table_value * best_value + w.example * example_tables.get(lower, 0.0))
            if (named.get(name, 0.0) >= w.strong_table_name or best_name >= w.strong_column_name
                    or best_value >= w.strong_value or lower in example_tables):
                strong.add(name)
        ranked = heapq.nsmallest(k, scores, key=lambda n: (-scores[n], n))
        top = scores[ranked[0]] if ranked else 0.0
        chosen = [n for i, n in enumerate(ranked) if i == 0 or n in strong or scores[n] >= top - margin]
        referenced = self.referenced_tables(everything) if st.keep_referenced_tables else set()
        chosen += sorted((n for n in referenced if n in scores and n not in chosen), key=lambda n: (-scores[n], n))
        bridges = self.connect(chosen)
        selected = chosen + bridges

        shown_examples = [ExampleHit(meta.get("text", ""), meta.get("sql", ""), sim) for _, sim, meta in hits
                          if sim >= w.example_show_similarity][: w.examples_shown]

        similarities: dict[str, dict[str, float]] = {}  # per table, queried once whichever contexts are tried

        def column_similarities(table: str) -> dict[str, float]:
            if table not in similarities:
                similarities[table] = self._similarities(collection_for_table(table), vectors)
            return similarities[table]

        def context(tables: list[str], every_column: bool, pruned: str) -> SchemaContext:
            entries, joins = self._entries(tables, set(bridges), scores, evidence, example_columns,
                                           column_similarities, m, floor, every_column, in_time)
            return SchemaContext(question=question, dialect=self.kb.dialect, k=k, m=m, entries=entries, joins=joins,
                                 values=[v for v in matches if v.table in set(tables)], examples=shown_examples,
                                 terms=terms, pruned=pruned)

        # Prune by budget, not by habit: pruning a schema that fits the prompt saves nothing and can
        # lose the answer. The whole database keeps the KB's table order, so consecutive questions on
        # one database share the prompt prefix the engine's cache serves.
        budget = st.context_budget_tokens
        if budget:
            # Only a whole database that may fit is worth a similarity query per table (thousands
            # of them on a large schema).
            if self.passes_whole_database():
                whole = context([t.name for t in self.kb.tables], True, WHOLE_DATABASE)
                if estimated_tokens(whole.render()) <= budget:
                    return whole
            tables_whole = context(selected, True, TABLES_ONLY)
            if estimated_tokens(tables_whole.render()) <= budget:
                return tables_whole
        pruned = context(selected, False, TABLES_AND_COLUMNS)
        return self._trim(pruned, budget) if budget else pruned

    def warm(self) -> None:
        """Load now what the first questions would otherwise load one by one: the question embedder
        (frozen in bfloat16, for the whole process: ``kb.embedding.freeze_query_embedder``), the
        value index's trigrams and every collection's embeddings (bench/retrieval_scale.py warms
        before timing). The chat and eval stay lazy: the chat reopens its retriever after each
        enrichment, and warming costs 23-25 s at 879 tables; a small KB reads little either way."""
        self._embed("warm")
        if self.settings.query_embedding_precision == "bfloat16":
            from reflect_sql.kb.embedding import freeze_query_embedder

            freeze_query_embedder()
        self.values.warm()
        self.store.preload()
        self.passes_whole_database()

    def passes_whole_database(self) -> bool:
        """Whether the whole database fits the context budget, so that retrieval passes it whole
        whatever the question's words (only the values and terms it names can still add a line).
        Its size hardly varies by question: it is estimated once, without any question's scores."""
        budget = self.settings.context_budget_tokens
        if not budget:
            return False
        if self._whole_tokens is None:
            names = [t.name for t in self.kb.tables]
            entries, _ = self._entries(names, set(), dict.fromkeys(names, 0.0), None, {}, lambda table: {},
                                       self.settings.m_columns, self.weights.column_floor, True)
            self._whole_tokens = estimated_tokens(SchemaContext(
                question="", dialect=self.kb.dialect, k=self.settings.k_tables, m=self.settings.m_columns,
                entries=entries).render())
        return self._whole_tokens <= budget

    def columns_meaning(self, text: str, limit: int = 3) -> list[tuple[str, str, float]]:
        """The ``limit`` columns whose documents (name, description, values) mean ``text`` most,
        as (table, column, cosine similarity), best first: the columns a name that exists nowhere,
        such as ``dish_name``, was most likely meant to be."""
        vector = self._embed(text)
        scored = [(sim, table.name, column) for table in self.kb.tables
                  for column, sim in self.store.similarities(collection_for_table(table.name), vector).items()]
        scored.sort(key=lambda x: (-x[0], x[1], x[2]))
        return [(table, column, sim) for sim, table, column in scored[:limit]]

    @staticmethod
    def _trim(context: SchemaContext, budget: int) -> SchemaContext:
        """Drop the lowest-scored columns of ``context`` until it fits ``budget``; key and join
        columns always stay (without them no join can be written)."""
        droppable = sorted(((c.score, t.name, c.name) for t in context.entries for c in t.columns
                            if not {"join", "key"} & set(c.why)), reverse=True)
        while droppable and estimated_tokens(context.render()) > budget:
            _, table, column = droppable.pop()
            for entry in context.entries:
                if entry.name == table:
                    entry.columns = [c for c in entry.columns if c.name != column]
        return context

    def _entries(self, selected: list[str], bridges: set[str], scores: dict[str, float], evidence: "_Evidence | None",
                 example_columns: dict[str, float],
                 column_similarities: Callable[[str], dict[str, float]], m: int, floor: float,
                 every_column: bool, in_time: bool = False) -> tuple[list[ContextTable], list[ForeignKey]]:
        """Step 2: the columns shown of each selected table, and the join edges among them."""
        w = self.weights
        joins, join_keys, references = self._joins(set(selected))
        entries = []
        for name in selected:
            table = self._table_by_name[name]
            sims = column_similarities(table.name)
            found = evidence.of(table) if evidence is not None else {}
            label = self._label_column(table) if evidence is not None and evidence.named.get(name, 0.0) >= 0.99 else None
            kept, rest = [], []
            # The time the question names needs a date column of this table, unless it names one.
            time_implied = in_time and not any(temporal(c) and found.get(c.name, NO_EVIDENCE)[0] >= IMPLIED_MATCH
                                               for c in table.columns)
            for c in table.columns:
                name_cov, _, value = found.get(c.name, NO_EVIDENCE)
                timed = time_implied and temporal(c)
                if timed:
                    name_cov = IMPLIED_MATCH
                example = example_columns.get(f"{table.name}.{c.name}".lower(), 0.0)
                score = (sims.get(c.name, 0.0) + w.column_name * name_cov + w.column_value * value
                         + w.label * (c.name == label) + w.example * example)
                why = [r for r, on in (("name", not timed and (name_cov > 0 or c.name == label)), ("time", timed),
                                       ("value", value > 0), ("example", example > 0)) if on]
                if (name, c.name) in join_keys:
                    kept.append((score, c, ["join"] + why))
                elif c.primary_key and len(selected) == 1:
                    kept.append((score, c, ["key"] + why))
                else:
                    rest.append((score, c, why or ["semantic"]))
            rest.sort(key=lambda x: -x[0])
            kept += rest if every_column else [x for x in rest[:m] if x[0] >= floor]
            order = {c.name: i for i, c in enumerate(table.columns)}
            kept.sort(key=lambda x: order[x[1].name])
            entries.append(ContextTable(
                name=table.name, description=table.description, score=scores[name], bridge=name in bridges,
                total_columns=len(table.columns),
                columns=[self._context_column(c, s, why, references.get((name, c.name))) for s, c, why in kept]))
        return entries, joins

    def _joins(self, tables: set[str]) -> tuple[list[ForeignKey], set[tuple[str, str]], dict[tuple[str, str], str]]:
        """The FK edges among ``tables``, their key columns, and each referencing column's target."""
        joins = [fk for fk in self.kb.foreign_keys if fk.table in tables and fk.ref_table in tables]
        join_keys = {(j.table, c) for j in joins for c in j.columns} | {(j.ref_table, c) for j in joins for c in j.ref_columns}
        references = {(j.table, c): f"{j.ref_table}({r})" for j in joins for c, r in zip(j.columns, j.ref_columns)}
        return joins, join_keys, references

    def extend(self, context: SchemaContext, wanted: dict[str, list[str]]) -> SchemaContext:
        """``context`` with the tables and columns of ``wanted`` (``{table: [column, ...]}``) added,
        plus the bridge tables and key columns that join them to the tables already there.

        The syntax loop calls it when a query needs a column retrieval did not show. A new context
        is returned; ``context`` is left as it was (the retrieval step recorded it). Names the KB does
        not know are ignored.
        """
        asked: dict[str, set[str]] = {}
        for name, columns in wanted.items():
            table = self.kb.table(name)
            if table is not None:
                asked.setdefault(table.name, set()).update(
                    c.name for c in table.columns if c.name.lower() in {x.lower() for x in columns})
        present = [t.name for t in context.entries]
        new = [name for name in asked if name not in present]
        tree, bridges = set(present), []
        for name in new:
            for node in self._path(tree, name) if tree else []:
                if node not in tree and node not in new:
                    bridges.append(node)
                tree.add(node)
            tree.add(name)
        selected = present + bridges + new
        joins, join_keys, references = self._joins(set(selected))
        entries = []
        for name in selected:
            table = self.kb.table(name)
            old = context.table(name)
            if table is None:  # a context from another KB; keep what it shows
                entries.append(old)
                continue
            shown = {c.name: c for c in old.columns} if old is not None else {}
            columns = []
            for c in table.columns:
                ref = references.get((name, c.name))
                if c.name in shown:
                    columns.append(dataclasses.replace(shown[c.name], references=ref or shown[c.name].references))
                elif (name, c.name) in join_keys or c.name in asked.get(name, ()) or (old is None and c.primary_key):
                    why = ["join"] if (name, c.name) in join_keys else ["repair"]
                    columns.append(self._context_column(c, 0.0, why, ref))
            if old is not None:
                entries.append(dataclasses.replace(old, columns=columns))
            else:
                entries.append(ContextTable(name=name, columns=columns, description=table.description,
                                            bridge=name in bridges, total_columns=len(table.columns)))
        return dataclasses.replace(context, entries=entries, joins=joins)

    @staticmethod
    def _context_column(c: ColumnEntry, score: float, why: list[str], ref: str | None) -> ContextColumn:
        value_note = c.value_description
        if value_note:
            value_note = re.sub(r"(?i)commonsense (evidence|reasoning)\s*:?", " ", value_note).strip()
        return ContextColumn(name=c.name, type=c.type, primary_key=c.primary_key, references=ref,
                             description=c.description, value_note=value_note, samples=list(c.samples),
                             score=score, why=why)

