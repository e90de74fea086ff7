"""reflect_sql.programs"""
