"""rows into files: the write plan, data files and their add actions, the Arrow writer."""
