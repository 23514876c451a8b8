"""filters and constraints: the Spark SQL subset parsed, evaluated over Arrow, used to skip files."""
