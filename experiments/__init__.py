"""reflect_sql.experiments"""
