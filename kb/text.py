"""Text folding and word splitting shared by the value index and lexical retrieval.

Folding makes "Trà sữa nướng", "TRA SUA NUONG" and "tra sua nuong" one key: Unicode NFKD, marks
dropped, letters NFKD cannot split mapped by hand, case folded, punctuation turned into spaces.
"""
from __future__ import annotations

import re
import unicodedata

# Letters that carry no combining mark in NFKD, so stripping marks leaves them untouched.
_SPECIAL = str.maketrans({
    "đ": "d", "Đ": "d", "ø": "o", "Ø": "o", "ł": "l", "Ł": "l", "ß": "ss", "æ": "ae", "Æ": "ae",
    "œ": "oe", "Œ": "oe", "þ": "th", "ð": "d", "ı": "i",
})
_NON_WORD = re.compile(r"[^0-9a-z]+")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])|(?<=[A-Za-z])(?=[0-9])|(?<=[0-9])(?=[A-Za-z])")

STOPWORDS = frozenset("""
a an the of in on at to for from by with and or not no is are was were be been being do does did has
have had it its this that these those which what who whom whose when where why how all any each
every some me my our your their his her them they he she we you i than then there here as into
about above below over under more most less least many much one ones per please list show give find
tell return display also only both other such same can could would should will shall may might refer
refers referred
""".split())


def fold(text: str) -> str:
    """Accent-, case- and punctuation-insensitive form: words separated by single spaces."""
    text = unicodedata.normalize("NFKD", str(text).translate(_SPECIAL))
    text = "".join(ch for ch in text if not unicodedata.combining(ch))
    text = text.translate(_SPECIAL).casefold()
    return " ".join(_NON_WORD.split(text)).strip()


def split_identifier(name: str) -> list[str]:
    """``hair_colour_id`` -> [hair, colour, id]; ``FlightNo`` -> [flight, no]."""
    return fold(_CAMEL.sub(" ", str(name))).split()


_VOWELS = set("aeiou")


def _cvc(word: str) -> bool:
    """Consonant-vowel-consonant ending, the last not w/x/y: "hir", "nam" (Porter's *o)."""
    return (len(word) >= 3 and word[-1] not in _VOWELS | {"w", "x", "y"} and word[-2] in _VOWELS
            and word[-3] not in _VOWELS)


def stem(word: str) -> str:
    """A small English stemmer (Porter's steps 1a-1b, roughly): "singers" -> "singer",
    "cities" -> "city", "heroes" -> "hero", "hiring"/"hire" -> "hire", "named" -> "name".
    Applied to questions and schema names alike, so its errors cancel out."""
    if len(word) <= 3 or not word.isalpha():
        return word
    if word.endswith("sses"):
        word = word[:-2]
    elif word.endswith("ies") and len(word) > 4:
        word = word[:-3] + "y"
    elif word.endswith("oes") and len(word) > 4:
        word = word[:-2]
    elif word.endswith(("ches", "shes", "xes", "zes")):
        word = word[:-2]
    elif word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
    for suffix in ("ing", "ed"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            base = word[: -len(suffix)]
            if not _VOWELS & set(base):
                break
            if base.endswith(("at", "bl", "iz")):
                return base + "e"
            if len(base) >= 2 and base[-1] == base[-2] and base[-1] not in "lsz":
                return base[:-1]
            if _cvc(base) and len(base) <= 4:
                return base + "e"
            return base
    return word


def words(text: str) -> list[str]:
    """Folded words of free text, identifiers inside it split too (``power_name`` -> power, name)."""
    return fold(_CAMEL.sub(" ", str(text))).split()


# Adjectives and verbs that ask about an attribute without naming it ("the oldest singer" -> age).
# General English, not tied to any schema: a question says "taller", a column says "height".
ATTRIBUTE_WORDS = {
    "age": "old older oldest young younger youngest aged",
    "height": "tall taller tallest short shorter shortest",
    "weight": "heavy heavier heaviest light lighter lightest weigh weighs",
    "length": "long longer longest",
    "price": "expensive cheap cheaper cheapest cost costs costly",
    "population": "populous populated inhabitants populace",
    "area": "large larger largest small smaller smallest big bigger biggest",
    "year": "when",
    "date": "when",
    "count": "many",
}
# A question that places itself in time ("in May 2025", "last night", "this month") filters on a
# date or time column it does not name. General English, and ISO dates and years in any language.
_MONTHS = ("january february march april june july august september october november december "
           "jan feb mar apr jun jul aug sep sept oct nov dec")
_TIME_EXPRESSION = re.compile(
    r"\b(?:" + "|".join(_MONTHS.split()) + r")\b"
    r"|\bmay\b(?=\s*(?:\d|of\b|this\b|last\b))|\b(?:in|of|during|since|until|before|after)\s+may\b"
    r"|\b(?:today|yesterday|tonight|tomorrow|daily|weekly|monthly|yearly|annually|quarterly)\b"
    r"|\b(?:this|last|next|previous|past|current|each|every|per)\s+(?:night|day|week|month|year|quarter|morning|evening)\b"
    r"|\b(?:19|20)\d\d\b|\b\d{4}-\d{2}(?:-\d{2})?\b|\b\d{1,2}/\d{4}\b",
    re.IGNORECASE)


def places_in_time(text: str) -> bool:
    """Whether ``text`` names a time (a month, a year, a date, "last night", "per month")."""
    return bool(_TIME_EXPRESSION.search(text))


ATTRIBUTES_OF: dict[str, set[str]] = {}
for _attribute, _words in ATTRIBUTE_WORDS.items():
    for _word in _words.split():
        ATTRIBUTES_OF.setdefault(_word, set()).add(_attribute)
