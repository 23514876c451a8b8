"""OPTIMIZE and Z-order, VACUUM, RESTORE and log cleanup."""
