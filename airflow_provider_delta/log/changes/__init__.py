"""what a range of versions changed: actions and Delta Spark's table_changes rows."""
