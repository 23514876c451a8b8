"""Delta types and Arrow, column mapping, partition values and statistics of data files."""
