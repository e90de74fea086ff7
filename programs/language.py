"""The question's language, and its English rendering for retrieval (the KB is in the schema's language).

Detection is deterministic, by script and diacritics, so that an English question never costs an LM
call: a question is Vietnamese when at least a quarter of its words carry Vietnamese letters or tone
marks and hardly any are English function words (an English question naming "Lẩu Thái" and "Trà
sữa nướng" stays English); it is in another language when most of its letters are of a non-Latin
script. Vietnamese written without diacritics reads as English: nothing in its letters tells it apart.

A question not in English is rendered in English by the LM (``RenderQuestion``) once per question;
the retriever then searches with both texts and merges their hits (``Retriever.retrieve``'s
``renderings``). The rendering is a trace step with its cost.
"""
from __future__ import annotations

import re
import unicodedata

from reflect_sql.programs.invoke import call_predictor, make_predictor
from reflect_sql.programs.trace import Trace, TraceStep
from reflect_sql.settings import Settings
from reflect_sql.signatures.question_rendering import RenderQuestion

ENGLISH = "en"
VIETNAMESE = "vi"
OTHER = "other"
LANGUAGE_NAMES = {ENGLISH: "English", VIETNAMESE: "Vietnamese", OTHER: "not English"}

RENDERING_MAX_TOKENS = 96  # one sentence

_WORD = re.compile(r"[^\W\d_]+")
_VIETNAMESE_LETTERS = frozenset("ăâđêôơưĂÂĐÊÔƠƯ")
# Combining marks of Vietnamese's five tones and of its ă/ơ/ư, once letters are decomposed (NFD).
_VIETNAMESE_MARKS = frozenset("\u0300\u0301\u0303\u0309\u0323\u0306\u031b")
_ENGLISH_FUNCTION_WORDS = frozenset(
    "a an the of in on at to for from by with and or is are was were be been has have had do does did how what "
    "which who whom whose when where why many much per each every all any not no than that this these those it "
    "its their there".split())


def _vietnamese_word(word: str) -> bool:
    return bool(set(word) & _VIETNAMESE_LETTERS) or bool(set(unicodedata.normalize("NFD", word)) & _VIETNAMESE_MARKS)


def _latin(letter: str) -> bool:
    return unicodedata.name(letter, "").startswith("LATIN")


def detect_language(text: str) -> str:
    """``en``, ``vi`` or ``other`` (a non-Latin script): see the module's docstring."""
    found = _WORD.findall(text or "")
    if not found:
        return ENGLISH
    letters = "".join(found)
    if sum(map(_latin, letters)) < len(letters) / 2:
        return OTHER
    vietnamese = sum(map(_vietnamese_word, found)) / len(found)
    english = sum(w.lower() in _ENGLISH_FUNCTION_WORDS for w in found) / len(found)
    return VIETNAMESE if vietnamese >= 0.25 and english < 0.1 else ENGLISH


class QuestionRenderer:
    """Renders a question in English when it is not, once per question, as a trace step.

    Not a ``dspy.Module``: its predictor stays out of the program's ``named_predictors``, so the
    compiled programs saved before it existed still load (each must hold every predictor's state),
    and no optimizer spends its budget on a translation that only feeds retrieval."""

    def __init__(self, settings: Settings, handles):
        self.settings = settings
        self.predictor = make_predictor(RenderQuestion, RENDERING_MAX_TOKENS)
        self.handles = handles  # the generator's LM renders: it is the one that reads the question

    def _glossary(self, question: str) -> dict[str, str]:
        """The KB's glossary words the question uses (a retriever without a glossary has none)."""
        glossary_in = getattr(self.handles.retriever, "glossary_in", None)
        return dict(glossary_in(question)) if glossary_in is not None else {}

    def renderings(self, question: str, trace: Trace, round: int = 0) -> tuple[str, ...]:
        """() for an English question (no LM call) or with ``render_questions`` off, else the
        question's English rendering."""
        language = detect_language(question)
        if language == ENGLISH or not self.settings.render_questions:
            return ()
        whole = getattr(self.handles.retriever, "passes_whole_database", None)
        if whole is not None and whole():
            # A whole schema goes to the prompt whatever the question says: an English rendering
            # could not change it.
            trace.add(TraceStep("retrieval.render", round, 0, inputs={"language": language},
                                decision="skipped: retrieval passes the whole database"))
            return ()
        glossary = self._glossary(question)
        call = call_predictor(self.predictor, "retrieval.render", self.handles.generator_lm,
                              question=question, language=LANGUAGE_NAMES[language],
                              glossary="\n".join(f"{word}: {meaning}" for word, meaning in glossary.items()))
        step = trace.add(TraceStep("retrieval.render", round, 0, cost=call.cost,
                                   inputs={"language": language, "glossary": sorted(glossary)}))
        english = " ".join(str(getattr(call.output, "english_question", "") or "").split()) if call.output else ""
        if not english:
            step.failure = f"rendering failed ({call.failure})" if call.failure else "the rendering was empty"
            step.decision = "retrieve with the question alone"
            return ()
        step.rewrite = {"english": english}
        step.decision = "retrieve with the question and its English rendering"
        return (english,)
