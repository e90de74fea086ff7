"""reflect_sql.signatures"""
