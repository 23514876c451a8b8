"""Client-side faults, injected into the core's storage calls inside one actor process.

The core reaches storage through a few calls (``storage.put_if_absent`` for commits, and ``LogStore``'s
``write_replace``, ``read_log_file``, ``list_log``, ``open_input_file``, plus ``storage.delete_files`` for
VACUUM and log cleanup). Each call draws, from the actor's seeded generator, at most one fault:

- ``lost_ack`` (writes): the write lands, then the call raises ``ConnectionResetError``;
- ``not_sent`` (writes): the call raises ``TimeoutError`` and writes nothing;
- ``read_error`` (reads and listings): a transient ``ConnectionError`` before anything is read;
- ``slow`` (any call): 100-800 ms before the call;
- ``interrupted_delete`` (deletes): a prefix of the batch is deleted, then ``ConnectionError``.

Every injected exception also derives from :class:`InjectedFault`, so an actor can tell the faults it was
dealt from errors the core raised itself; each injection is recorded before it is raised, so the parent's
count survives a SIGKILL.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import pkgutil
import random
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

from airflow_provider_delta import log as core
from airflow_provider_delta.log.files import storage
from airflow_provider_delta.log.files.storage import LogStore


class InjectedFault(Exception):
    """Marks an exception the chaos test raised on purpose."""


class InjectedLostAck(InjectedFault, ConnectionResetError):
    pass


class InjectedNotSent(InjectedFault, TimeoutError):
    pass


class InjectedReadError(InjectedFault, ConnectionError):
    pass


@dataclass(frozen=True)
class ClientFaultRates:
    """Probability of each fault per storage call of the kind it applies to."""

    lost_ack: float = 0.04
    not_sent: float = 0.04
    read_error: float = 0.02
    slow: float = 0.02
    interrupted_delete: float = 0.15

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


# Which faults each kind of call can draw, in drawing order.
_KINDS = {
    "write": ("lost_ack", "not_sent", "slow"),
    "read": ("read_error", "slow"),
    "delete": ("interrupted_delete", "slow"),
}


class ClientFaults:
    """Draws and injects faults; ``record(kind, call)`` is told of each one before it takes effect."""

    def __init__(self, rates: ClientFaultRates, seed: int, record: Callable[[str, str], None]) -> None:
        self.rates = rates.as_dict()
        self._rng = random.Random(seed)
        self._record = record

    def draw(self, kind: str, call: str) -> str | None:
        x = self._rng.random()
        for fault in _KINDS[kind]:
            if x < self.rates[fault]:
                self._record(fault, call)
                if fault == "slow":
                    time.sleep(self._rng.uniform(0.1, 0.8))
                    return None
                return fault
            x -= self.rates[fault]
        return None

    def install(self) -> None:
        """Wrap the core's storage calls in this process (the actor's whole life: it is never undone)."""
        real_put, real_delete = storage.put_if_absent, storage.delete_files
        real_replace, real_read = LogStore.write_replace, LogStore.read_log_file
        real_list, real_open = LogStore.list_log, LogStore.open_input_file

        def put_if_absent(store: LogStore, name: str, data: bytes, **kwargs: Any) -> None:
            self._write(f"put {name}", lambda: real_put(store, name, data, **kwargs))

        def write_replace(store: LogStore, path: str, data: bytes) -> None:
            self._write(f"replace {path.rsplit('/', 1)[-1]}", lambda: real_replace(store, path, data))

        def read_log_file(store: LogStore, name: str) -> bytes:
            self._read(f"read {name}")
            return real_read(store, name)

        def list_log(store: LogStore, start_version: int = 0) -> list:
            self._read("list")
            return real_list(store, start_version)

        def open_input_file(store: LogStore, path: str) -> Any:
            self._read(f"open {path.rsplit('/', 1)[-1]}")
            return real_open(store, path)

        def delete_files(store: LogStore, paths: list[str], under: str, **kwargs: Any) -> None:
            if paths and self.draw("delete", f"delete {len(paths)} files") == "interrupted_delete":
                kept = self._rng.randrange(len(paths))
                real_delete(store, paths[:kept], under, **kwargs)
                raise InjectedReadError(f"injected: deletion interrupted after {kept} of {len(paths)} files")
            real_delete(store, paths, under, **kwargs)

        _replace_in_core(real_put, put_if_absent)
        _replace_in_core(real_delete, delete_files)
        @contextlib.contextmanager
        def replacing(store: LogStore, path: str) -> Iterator[io.BytesIO]:
            # Streamed writes (checkpoints) take the faults of write_replace: gathered, then put through it.
            buf = io.BytesIO()
            yield buf
            write_replace(store, path, buf.getvalue())

        LogStore.write_replace = write_replace  # type: ignore[method-assign]
        LogStore.replacing = replacing  # type: ignore[method-assign,assignment]
        LogStore.read_log_file = read_log_file  # type: ignore[method-assign]
        LogStore.list_log = list_log  # type: ignore[method-assign]
        LogStore.open_input_file = open_input_file  # type: ignore[method-assign]

    def _write(self, call: str, write: Callable[[], None]) -> None:
        fault = self.draw("write", call)
        if fault == "not_sent":
            raise InjectedNotSent(f"injected: {call} was never sent")
        write()
        if fault == "lost_ack":
            raise InjectedLostAck(f"injected: {call} landed but its response was lost")

    def _read(self, call: str) -> None:
        if self.draw("read", call) == "read_error":
            raise InjectedReadError(f"injected: {call} failed transiently")


def _replace_in_core(original: Callable[..., Any], replacement: Callable[..., Any]) -> None:
    """Rebind ``original`` in every core module that imported it by name (``from .storage import x``).

    The core imports some modules lazily (VACUUM, cleanup, checkpoints), so all of them are imported first.
    """
    for module in pkgutil.iter_modules(core.__path__):
        importlib.import_module(f"{core.__name__}.{module.name}")
    for name, module in list(sys.modules.items()):
        if name == core.__name__ or name.startswith(core.__name__ + "."):
            for attr, value in list(vars(module).items()):
                if value is original:
                    setattr(module, attr, replacement)
