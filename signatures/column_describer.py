"""Column describer (paper section 3, "build understanding of obscure schemas"): one sentence saying
what an undocumented column holds, written from its name, type and sample values."""
from __future__ import annotations

import dspy


class ColumnDescriber(dspy.Signature):
    """You document a database column that has no description, for analysts who will write SQL
    against it. Write one plain sentence (at most 30 words) saying what the column holds.

    A good description:
    - names the real-world thing and, when the samples show it, its unit or format ("amount in
      US dollars", "date as YYYY-MM-DD", "two-letter country code");
    - for a coded column, says what the codes stand for when the samples make it evident, and
      lists the codes otherwise ("status code: 'A', 'C' or 'P'");
    - for an id or key column, says which entity it identifies or refers to;
    - uses only what the table name, column name, type, sibling columns and samples support:
      no guessed meanings stated as facts; write "probably" when unsure.
    Do not repeat the column name as its own description ("price: the price" says nothing)."""

    table: str = dspy.InputField(desc="Name of the table holding the column.")
    column: str = dspy.InputField(desc="Name of the column to describe.")
    column_type: str = dspy.InputField(desc="Declared SQL type; may be empty.")
    sample_values: list[str] = dspy.InputField(desc="A few distinct values stored in the column.")
    sibling_columns: list[str] = dspy.InputField(desc="The table's other columns, for context.")

    description: str = dspy.OutputField(desc="One sentence, at most 30 words, saying what the column holds.")
