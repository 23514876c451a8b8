"""pyiceberg's ``FileIO`` over the table's own fsspec filesystem, with put-if-absent for metadata files.

The conversion reads and writes Iceberg's files through the ``LogStore`` the Delta table was opened with,
so a table on S3, GCS or Azure needs no second set of credentials: reads are pyiceberg's
``FsspecInputFile`` over that filesystem; a file is written whole when its stream closes without an
error. Manifests and manifest lists (``create(overwrite=True)``, unique names) replace whatever is there;
a table metadata file (``create(overwrite=False)``) is created only if absent
(``storage.create_if_absent``): two converters racing for ``vN.metadata.json`` cannot both win, and the
loser gets ``FileExistsError``.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable
from functools import cache
from typing import TYPE_CHECKING, Any

from ..files.storage import LogStore, create_if_absent
from .metadata_files import fs_path

if TYPE_CHECKING:
    from pyiceberg.io import FileIO


def table_file_io(store: LogStore) -> FileIO:
    """A ``FileIO`` over ``store``'s filesystem that remembers what it wrote (``written``), so that a
    conversion that loses a race or fails can remove its manifests."""
    return _classes()[0](store)


class _Upload(io.BytesIO):
    """The bytes of one file, handed to ``publish`` when the stream closes, unless a ``with`` block around
    it failed (then nothing is written)."""

    def __init__(self, publish: Callable[[bytes], None]) -> None:
        super().__init__()
        self._publish = publish
        self._failed = False

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self._failed = exc_type is not None
        super().__exit__(exc_type, exc, tb)

    def close(self) -> None:
        if self.closed:
            return
        data = self.getvalue()
        super().close()
        if not self._failed:
            self._publish(data)


@cache
def _classes() -> tuple[type, type]:
    """The FileIO and OutputFile classes, built on first use: pyiceberg is an optional dependency."""
    from pyiceberg.io import FileIO, InputFile, OutputFile, OutputStream
    from pyiceberg.io.fsspec import FsspecInputFile

    class TableOutputFile(OutputFile):
        def __init__(self, location: str, store: LogStore, written: list[str]) -> None:
            super().__init__(location)
            self._store = store
            self._path = fs_path(store, location)
            self._written = written
            self._size: int | None = None
            self.attempted: bytes | None = None  # what a create-if-absent tried to write

        def __len__(self) -> int:
            return self._size if self._size is not None else int(self._store.fs.info(self._path)["size"])

        def exists(self) -> bool:
            return self._store.fs.exists(self._path)

        def to_input_file(self) -> InputFile:
            return FsspecInputFile(location=self._path, fs=self._store.fs)

        def create(self, overwrite: bool = False) -> OutputStream:
            def publish(data: bytes) -> None:
                if overwrite:
                    self._store.write_replace(self._path, data)
                else:
                    # Metadata files only: a backend without an atomic create still checks before it
                    # writes, and a lost race there costs one conversion, never the Delta commit.
                    self.attempted = data
                    create_if_absent(self._store, self._path, data, allow_unsafe=True)
                self._size = len(data)
                self._written.append(self.location)

            return _Upload(publish)  # type: ignore[return-value]

    class TableFileIO(FileIO):
        def __init__(self, store: LogStore) -> None:
            super().__init__(properties={})
            self.store = store
            self.written: list[str] = []

        def new_input(self, location: str) -> InputFile:
            return FsspecInputFile(location=fs_path(self.store, location), fs=self.store.fs)

        def new_output(self, location: str) -> OutputFile:
            return TableOutputFile(location, self.store, self.written)

        def delete(self, location: str | InputFile | OutputFile) -> None:
            where = location if isinstance(location, str) else location.location
            with contextlib.suppress(FileNotFoundError):
                self.store.fs.rm_file(fs_path(self.store, where))

    return TableFileIO, TableOutputFile
