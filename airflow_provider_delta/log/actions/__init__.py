"""the spec's actions as dataclasses, their Arrow shapes, commitInfo, and a commit's bytes."""
