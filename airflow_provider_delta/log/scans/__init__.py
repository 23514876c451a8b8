"""reading a version's rows: each data file as logical rows, the Arrow scan over them."""
