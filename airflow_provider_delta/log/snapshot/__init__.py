"""the state of a version: log replay, the snapshot, history, checkpoints written from it."""
