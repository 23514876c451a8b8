"""The chaos test's helpers: client-side faults, the actor processes, the run loop and the audit.

``tests/log/test_chaos.py`` drives them; docs/reliability.md describes what they do and the figures.
"""
