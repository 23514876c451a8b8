"""deltalog, the command line over the facade."""
