"""UniForm: a Delta table kept readable as an Iceberg table, its Iceberg metadata written after each
commit."""
