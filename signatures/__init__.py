"""reflect_sql.signatures: one DSPy signature per role, each with its scoring rubric."""
