"""A per-case deadline for tests that must never hang (the fuzz test, the bounded-work regressions).

Not a timing assertion: the limit is generous, and only a case that would otherwise run forever (a loop
proportional to a version number named by a stray file) reaches it. It fails the test, naming the case,
instead of blocking the suite.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


class Hang(BaseException):
    """A case ran past its deadline (a BaseException, so that no ``except Exception`` swallows it)."""


@contextmanager
def deadline(seconds: float, what: str) -> Iterator[None]:
    """Interrupt the block with ``Hang`` after ``seconds``: SIGALRM, as pytest runs tests on the main
    thread, and a Python loop, however long, is interrupted between two bytecodes."""
    assert threading.current_thread() is threading.main_thread(), "a deadline needs the main thread"

    def on_alarm(signum: int, frame: Any) -> None:
        raise Hang(f"no outcome within {seconds} s: {what}")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
