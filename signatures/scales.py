"""The judges' score scales.

A score is asked for as an integer with its anchors in words ("an integer from 1 (...) to 10
(...)"), not as a list of options: DSPy renders ``Literal[1, ..., 10]`` as "one of: 1; 2; ...; 10",
and the embedded Qwen2.5-Coder models copy the first option into every score field, even after a
rationale that says the SQL is right (experiments/results/judge_scale.md). An integer outside its
scale is a malformed judgment, not a strong one: ``out_of_scale`` names it, and the caller treats
the reply as unparsable (``programs/judgment.py``).
"""
from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Scale:
    low: int
    high: int

    def describe(self, label: str, anchors: dict[int, str]) -> str:
        """``"C: an integer from 1 (wrong columns) to 10 (exact); 5 = one wrong"``: the ends first, as
        the model reads the range before the middle."""
        ends = f"an integer from {self.low} ({anchors[self.low]}) to {self.high} ({anchors[self.high]})"
        middle = "; ".join(f"{k} = {v}" for k, v in sorted(anchors.items()) if k not in (self.low, self.high))
        return f"{label}: {ends}" + (f"; {middle}" if middle else "")

    @classmethod
    def described_in(cls, desc: str) -> "Scale | None":
        """The scale ``describe`` wrote into a field's description, or None for any other field: how
        an adapter finds a signature's score fields (to bound them in a JSON schema) from the one
        place that writes them."""
        found = _DESCRIBED.search(desc or "")
        return cls(int(found.group(1)), int(found.group(2))) if found else None

    def contains(self, value: object) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and self.low <= value <= self.high


_DESCRIBED = re.compile(r"^\w+: an integer from (\d+) \(.*\) to (\d+) \(")

SCALE_10 = Scale(1, 10)
SCALE_5 = Scale(1, 5)

# Each judge's scale, in one place: the signatures describe it to the model, the rubrics check
# replies against it, and the settings keep each threshold inside it.
RETRIEVAL_SCALE = SCALE_10
SEMANTIC_SCALE = SCALE_10
ENTAILMENT_SCALE = SCALE_5

# The annotation of a score field; the range is checked on the parsed value (see module docstring).
Score10 = int
Score5 = int

# A judge's rationale is one short line. Its field description opens with ONE_LINE, and where the
# reply is constrained by a JSON schema (adapter: json, on the embedded engine) the string may hold
# at most ONE_LINE_CHARS characters: a small model that repeats itself is cut there by the grammar
# instead of spending its completion budget (the 0.5B's semantic judge reached 256 tokens). At 160
# the 1.5B's semantic rationales ran 102-160 characters, four per reply at 7-8 tokens a second;
# 100 keeps a line that names the column or join in question.
ONE_LINE = "One short line"
ONE_LINE_CHARS = 100
# A list a judge writes (the retrieval judge's missing aspects), whose description opens with
# SHORT_LIST, holds at most LIST_ITEMS one-line items under the same schema: the 1.5B wrote "no join
# path from tables to order_items" 20 times over until its 256-token budget ran out, twice in one
# demo question, and the cut reply was lost.
LIST_ITEMS = 5
SHORT_LIST = f"At most {LIST_ITEMS} short lines"  # opens the description of such a list
