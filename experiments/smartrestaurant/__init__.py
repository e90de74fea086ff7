"""The SmartRestaurant ("Aria") scenario: the paper's section 8 restaurant, as a demo and test bed.

A deterministic generator writes the database (SQLite, and the same rows into PostgreSQL), next to
BIRD-style column descriptions, a glossary and a bilingual question set whose gold SQL runs on
both engines.
"""
from pathlib import Path

HERE = Path(__file__).resolve().parent
DB_ID = "smartrestaurant"
DESCRIPTIONS_DIR = HERE / "descriptions"
GLOSSARY = HERE / "glossary.yaml"
QUESTIONS = HERE / "questions.json"
