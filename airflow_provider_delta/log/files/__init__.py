"""storage and the log's files: listing, put-if-absent, log segments, commit JSON, deletion vectors."""
