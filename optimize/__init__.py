"""reflect_sql.optimize"""
