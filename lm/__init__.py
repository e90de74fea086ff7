"""reflect_sql.lm: the language models behind the generator and the judges.

models (embedded weights), local_engine (llama.cpp engine for DSPy), factory (settings -> LMs),
client (ReflectLM: accounting + record/replay around DSPy's call path), accounting (CostMeter,
lm_scope), cassette (record/replay), failures (LMFailure, counted adapter fallback), scripted
(ScriptedLM for tests). Importing this package loads neither DSPy nor llama.cpp.
"""
