"""What each of the program's loops (retrieval, synthesis, entailment) holds: the settings it runs
with and the handles on what it uses but does not own (``programs/handles.py``)."""
from __future__ import annotations

import dspy

from reflect_sql.programs.handles import Handles
from reflect_sql.settings import Settings


class Loop(dspy.Module):
    def __init__(self, settings: Settings, handles: Handles):
        super().__init__()
        self.settings = settings
        self.handles = handles
