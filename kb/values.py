"""The value index: which table.column holds a literal the question mentions.

Distinct text values are stored folded (case, accents, punctuation) in an SQLite file in the KB
directory. A question is cut into word spans; a span equal to a folded value is an exact hit (an
indexed SQL lookup). A longer span that is no exact hit is looked up in a trigram index (built in
memory from the file on first use): the values sharing most trigrams with it are compared
character by character, which tolerates small typos ("Magnito" finds "Magneto"). A span found as
a phrase inside a stored value is a partial hit, found through SQLite's FTS5 word index whatever
the value's length ("Eden Street" in "On or near Eden Street"); a span that common values of many
columns contain says nothing about which column is meant, and is dropped. Ids, dates and numbers
are not indexed: a question never quotes them as names.
"""
from __future__ import annotations

import bisect
import difflib
import hashlib
import re
import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import numpy as np

from reflect_sql.kb.text import STOPWORDS, fold, split_identifier

VALUES_FILE = "values.sqlite"  # in every KB directory

# Longer values are free text: a question quotes them in part (a partial hit), never whole with a
# typo, so they stay out of the in-memory trigram index.
MAX_VALUE_CHARS = 80
MAX_SPAN_WORDS = 6
MIN_TYPO_CHARS = 5  # shorter spans only match exactly; trigrams cannot tell short words apart
TYPO_RATIO = 0.82
MAX_CANDIDATES = 25
# Partial hits: a phrase of at least two words (one word inside values is mostly noise: "powers"
# is in "Animal Oriented Powers" without asking for it), contained in values of at most this many
# columns (a phrase in every address column points at none of them).
MIN_PARTIAL_WORDS = 2
MAX_PARTIAL_COLUMNS = 3
# Below an exact hit (1.0) and a typo hit (>= 0.74), and below the retriever's "strong value" bar:
# a phrase inside a value is weaker evidence than the value itself.
PARTIAL_SCORE = 0.6

_DATE = re.compile(r"^\d{4}[-/.]\d{1,2}([-/.]\d{1,2})?([ T]\d{1,2}:\d{2}(:\d{2}(\.\d+)?)?)?$|^\d{1,2}:\d{2}(:\d{2})?$")
_HAS_LETTER = re.compile(r"[^\W\d_]")
_TEXT_TYPES = ("CHAR", "TEXT", "CLOB", "STRING", "VARCHAR", "NAME", "ENUM")
_DATE_TYPES = ("DATE", "TIME")


@dataclass(frozen=True)
class ValueMatch:
    table: str
    column: str
    value: str  # the stored value (an alias resolves to the value it stands for)
    span: str  # the question's words that matched, folded
    score: float  # 1.0 exact; lower for typo-tolerant matches
    alias: str | None = None
    partial: bool = False  # the span is inside ``value``, not the whole of it

    def to_json(self) -> dict:
        out = {"table": self.table, "column": self.column, "value": self.value, "matched": self.span,
               "score": round(self.score, 3)}
        if self.alias:
            out["alias"] = self.alias
        if self.partial:
            out["partial"] = True
        return out


def looks_like_id(column: str) -> bool:
    parts = split_identifier(column)
    return bool(parts) and parts[-1] in {"id", "ids", "uuid", "guid", "key", "pk", "fk"}


def indexable_column(name: str, type_: str, samples: list) -> bool:
    """Text-like columns only; not ids, not dates (by type or by the look of the samples)."""
    upper = (type_ or "").upper()
    if looks_like_id(name) or any(t in upper for t in _DATE_TYPES):
        return False
    if upper and not any(t in upper for t in _TEXT_TYPES):
        return False
    texts = [s for s in samples if isinstance(s, str)]
    if samples and not texts:
        return False  # declared loosely (SQLite) but holds numbers
    if texts and sum(bool(_DATE.match(s.strip())) for s in texts) * 2 > len(texts):
        return False
    return True


def indexable_value(value) -> bool:
    """Text with a letter in it, of any length, that is not a date."""
    if not isinstance(value, str):
        return False
    value = value.strip()
    return bool(value) and bool(_HAS_LETTER.search(value)) and not _DATE.match(value)


_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS vals(id INTEGER PRIMARY KEY, tbl TEXT NOT NULL, col TEXT NOT NULL,
    value TEXT NOT NULL, norm TEXT NOT NULL, alias TEXT);
CREATE INDEX IF NOT EXISTS vals_norm ON vals(norm);
CREATE VIRTUAL TABLE IF NOT EXISTS vals_words USING fts5(norm, content='vals', content_rowid='id');
"""


def _trigrams(text: str) -> set[str]:
    return {text[i:i + 3] for i in range(len(text) - 2)}


def fingerprint(rows: Iterable[tuple[str, str, str, str | None]]) -> str:
    digest = hashlib.sha256()
    for row in rows:
        digest.update("\x1f".join("\x00" if x is None else x for x in row).encode("utf-8", "surrogatepass"))
        digest.update(b"\x1e")
    return digest.hexdigest()


class ValueIndex:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.RLock()
        self._forget_trigrams()

    def _connect(self) -> sqlite3.Connection:
        if self._conn is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # One retriever may be shared by worker threads: a lock, not thread affinity, guards it.
            self._conn = sqlite3.connect(self.path, check_same_thread=False)
            self._conn.executescript(_SCHEMA)
            if self._conn.execute("SELECT 1 FROM meta WHERE key = 'words'").fetchone() is None:
                self._reindex_words(self._conn)  # a file written before the word index existed
        return self._conn

    @staticmethod
    def _reindex_words(conn: sqlite3.Connection) -> None:
        with conn:
            conn.execute("INSERT INTO vals_words(vals_words) VALUES ('rebuild')")
            conn.execute("INSERT OR REPLACE INTO meta VALUES ('words', '1')")

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        self._forget_trigrams()

    def warm(self) -> None:
        """Open the index and build its trigrams now rather than at the first question."""
        if not self.path.is_file():  # opening would create it, and a build reads a missing file as "rebuild"
            return
        with self._lock:
            self._connect()
            self._trigram_index()

    def _forget_trigrams(self) -> None:
        self._grams: dict[str, np.ndarray] | None = None  # built on first use (_trigram_index)
        self._rows: list[tuple[str, str, str, str, str | None]] = []  # by length, then row id
        self._lengths: list[int] = []  # of each of self._rows' folded values: ascending
        self._ranks = np.zeros(0, dtype=np.int32)  # of each of self._rows in row-id order

    def _trigram_index(self) -> dict[str, np.ndarray]:
        """trigram -> positions (in ``self._rows``) of the values holding it, built on first use.

        Rows are ordered by length, so the values of a length comparable to a span are one range
        of positions: a span counts shared trigrams only there, not over every value. numpy
        filters and counts in C, which keeps a value index of 100,000 values fast."""
        if self._grams is None:
            by_id = [row for row in self._connect().execute("SELECT tbl, col, value, norm, alias FROM vals ORDER BY id")
                     if len(row[3]) <= MAX_VALUE_CHARS]
            order = sorted(range(len(by_id)), key=lambda i: len(by_id[i][3]))  # stable: ties stay in row-id order
            rows = [by_id[i] for i in order]
            grams: dict[str, list[int]] = {}
            for position, row in enumerate(rows):
                for g in _trigrams(row[3]):
                    grams.setdefault(g, []).append(position)
            self._rows = rows
            self._lengths = [len(r[3]) for r in rows]
            self._ranks = np.asarray(order, dtype=np.int32)
            self._grams = {g: np.asarray(ids, dtype=np.int32) for g, ids in grams.items()}
        return self._grams

    def _similar(self, span: str) -> list[tuple[str, str, str, str, str | None]]:
        """The values sharing most trigrams with ``span`` and of a comparable length."""
        grams = self._trigram_index()
        postings = [grams[g] for g in _trigrams(span) if g in grams]
        if not postings:
            return []
        first = bisect.bisect_left(self._lengths, 0.75 * len(span))
        end = bisect.bisect_right(self._lengths, 1.34 * len(span))
        hits = np.concatenate(postings)
        hits = hits[(hits >= first) & (hits < end)]
        if not hits.size:
            return []
        counts = np.bincount(hits - first)
        # A typo changes at most ~3 trigrams of a word; fewer shared ones cannot reach TYPO_RATIO.
        need = max(1, len(span) - 2 - 3 * max(1, len(span) // 8))
        ok = np.flatnonzero(counts >= need)
        best = ok[np.lexsort((self._ranks[ok + first], -counts[ok]))][:MAX_CANDIDATES]  # most shared, then by row id
        return [self._rows[first + i] for i in best]

    def stored_fingerprint(self, kind: str) -> str | None:
        if not self.path.is_file():
            return None
        row = self._connect().execute("SELECT value FROM meta WHERE key = ?", (f"fingerprint:{kind}",)).fetchone()
        return row[0] if row else None

    def replace_values(self, rows: list[tuple[str, str, str]], capped: Iterable[str] = ()) -> bool:
        """Make the index hold exactly these (table, column, value) rows read from the database;
        ``capped`` names ("table.column") the columns whose values were cut at the build's cap.

        Returns False, touching nothing but the capped list, when it already holds them.
        """
        conn = self._connect()
        with conn:
            conn.execute("INSERT OR REPLACE INTO meta VALUES ('capped', ?)",
                         ("\n".join(sorted({c.lower() for c in capped})),))
        return self._replace("values", [(t, c, v, None) for t, c, v in rows])

    def complete(self, table: str, column: str) -> bool:
        """Whether every distinct value of table.column is indexed (the build did not cap it)."""
        if not self.path.is_file():
            return False
        row = self._connect().execute("SELECT value FROM meta WHERE key = 'capped'").fetchone()
        return f"{table}.{column}".lower() not in set((row[0] if row else "").split("\n"))

    def replace_aliases(self, rows: list[tuple[str, str, str, str]]) -> bool:
        """Make the index hold exactly these (table, column, value, alias) rows: an alias is found
        like a value and reports the value it stands for."""
        return self._replace("aliases", rows)

    def _replace(self, kind: str, rows: list[tuple[str, str, str, str | None]]) -> bool:
        fp = fingerprint(rows)
        if fp == self.stored_fingerprint(kind):
            return False
        conn = self._connect()
        self._forget_trigrams()
        with conn:
            conn.execute(f"DELETE FROM vals WHERE alias IS {'NULL' if kind == 'values' else 'NOT NULL'}")
            conn.executemany(
                "INSERT INTO vals(tbl, col, value, norm, alias) VALUES (?, ?, ?, ?, ?)",
                [(t, c, v, fold(a if a is not None else v), a) for t, c, v, a in rows],
            )
            conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (f"fingerprint:{kind}", fp))
        self._reindex_words(conn)
        return True

    def size(self) -> int:
        if not self.path.is_file():
            return 0
        return self._connect().execute("SELECT count(*) FROM vals").fetchone()[0]

    def columns_holding(self, value: str) -> list[tuple[str, str, str]]:
        """(table, column, stored value) of every value that folds to the same key as ``value``."""
        if not self.path.is_file():
            return []
        rows = self._connect().execute(
            "SELECT DISTINCT tbl, col, value FROM vals WHERE norm = ? AND alias IS NULL", (fold(value),))
        return [tuple(r) for r in rows]

    def column_values(self, table: str, column: str) -> list[tuple[str, str]]:
        """(stored value, folded form) of every value indexed for table.column (names matched
        case-insensitively); [] when the column is not indexed."""
        if not self.path.is_file():
            return []
        with self._lock:
            rows = self._connect().execute(
                "SELECT value, norm FROM vals WHERE lower(tbl) = lower(?) AND lower(col) = lower(?) AND alias IS NULL",
                (table, column))
            return [tuple(r) for r in rows]

    def lookup(self, question: str, limit: int = 20) -> list[ValueMatch]:
        """Values the question mentions, best first, at most one per column."""
        if not self.path.is_file():
            return []
        with self._lock:
            return self._lookup(question, limit)

    def _lookup(self, question: str, limit: int) -> list[ValueMatch]:
        conn = self._connect()
        tokens = fold(question).split()
        spans: dict[str, None] = {}
        for n in range(MAX_SPAN_WORDS, 0, -1):
            for i in range(len(tokens) - n + 1):
                words = tokens[i:i + n]
                if all(w in STOPWORDS or w.isdigit() for w in words) or words[0] in STOPWORDS and n > 1:
                    continue
                span = " ".join(words)
                if len(span) >= 2:
                    spans.setdefault(span)
        best: dict[tuple[str, str], ValueMatch] = {}

        def offer(table, column, value, span, score, alias, partial=False):
            key = (table, column)
            if key not in best or score > best[key].score:
                best[key] = ValueMatch(table, column, value, span, score, alias, partial)

        span_list = list(spans)
        exact_hit: set[str] = set()
        for chunk_start in range(0, len(span_list), 500):
            chunk = span_list[chunk_start:chunk_start + 500]
            marks = ",".join("?" * len(chunk))
            for tbl, col, value, norm, alias in conn.execute(
                    f"SELECT tbl, col, value, norm, alias FROM vals WHERE norm IN ({marks})", chunk):
                exact_hit.add(norm)
                offer(tbl, col, value, norm, 1.0, alias)
        for span in span_list:
            if span in exact_hit or len(span) < MIN_TYPO_CHARS or len(span.split()) > 3:
                continue
            if any(span in hit for hit in exact_hit):
                continue  # a longer exact hit already explains these words
            rows = self._similar(span)
            for tbl, col, value, norm, alias in rows:
                matcher = difflib.SequenceMatcher(None, span, norm, autojunk=False)
                # quick_ratio bounds ratio from above: most candidates fail it, at a fraction of the cost.
                if matcher.quick_ratio() < TYPO_RATIO:
                    continue
                ratio = matcher.ratio()
                if ratio >= TYPO_RATIO:
                    offer(tbl, col, value, span, ratio * 0.9, alias)
        self._partial(conn, span_list, exact_hit, offer)
        return sorted(best.values(), key=lambda m: (-m.score, -len(m.span), m.table, m.column))[:limit]

    @staticmethod
    def _partial(conn: sqlite3.Connection, spans: list[str], exact_hit: set[str], offer) -> None:
        """Spans found as a phrase inside longer stored values, longest span first."""
        found: list[str] = []
        for span in spans:  # longest first
            words = span.split()
            if words[0] in STOPWORDS or words[-1] in STOPWORDS or any(w.isdigit() for w in (words[0], words[-1])):
                continue
            if len(words) < MIN_PARTIAL_WORDS:
                continue
            if span in exact_hit or any(span in longer for longer in found) or any(span in hit for hit in exact_hit):
                continue
            columns: dict[tuple[str, str], tuple[str, str | None]] = {}
            # The span is folded to [0-9a-z ] words, so quoting it makes an FTS5 phrase query.
            for tbl, col, value, alias in conn.execute(
                    "SELECT v.tbl, v.col, v.value, v.alias FROM vals_words JOIN vals AS v ON v.id = vals_words.rowid "
                    "WHERE vals_words MATCH ? AND v.norm != ? LIMIT 200", (f'"{span}"', span)):
                columns.setdefault((tbl, col), (value, alias))
                if len(columns) > MAX_PARTIAL_COLUMNS:
                    break
            if not columns or len(columns) > MAX_PARTIAL_COLUMNS:
                continue
            found.append(span)
            for (tbl, col), (value, alias) in columns.items():
                offer(tbl, col, value, span, PARTIAL_SCORE, alias, partial=True)
