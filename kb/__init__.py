"""reflect_sql.kb: the knowledge base of one database (paper section 3).

A KB directory holds a versioned JSON document (the source of truth: ``model.py``,
``versions.py``), chroma collections derived from it (``documents.py``, ``store.py``,
``embedding.py``) and a value index (``values.py``). ``build.py`` makes and incrementally rebuilds
it from the database and its sources (``sources.py``, optionally ``describe.py``);
``retrieve.py`` answers a question with a ``SchemaContext`` (``context.py``); ``enrich.py``
teaches it verified answers, with history and rollback. ``usage.py`` says which tables and
columns an SQL query uses.

Entry points: ``build.build_kb``, ``retrieve.Retriever(kb_dir).retrieve(question, k, m)`` and
``.enrich(question, sql, result, judgments)``, ``enrich.enrich / history / rollback``.
"""
