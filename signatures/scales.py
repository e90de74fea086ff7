"""The judges' score types. Literal (not a bare int) so that an out-of-scale answer fails to parse
instead of silently passing: a 12 on a 1-10 rubric is a malformed judgment, not a strong one."""
from __future__ import annotations

from typing import Literal

Score10 = Literal[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
Score5 = Literal[1, 2, 3, 4, 5]
