"""reflect_sql.lm"""
