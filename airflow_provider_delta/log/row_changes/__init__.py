"""Row-level changes (DELETE, UPDATE, MERGE): what any engine shares, and the Arrow engine that runs them in
the task, without Spark."""
