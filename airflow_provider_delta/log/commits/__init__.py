"""committing: the transaction, its committer, conflict checks and writer rules."""
