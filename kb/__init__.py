"""reflect_sql.kb"""
