"""Benchmarks of the Delta log core against deltalake (delta-rs); ``python -m bench``, docs/benchmarks.md."""
