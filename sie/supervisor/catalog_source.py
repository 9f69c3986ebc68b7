"""Where the supervisor reads the catalog from: a local models directory, watched for changes, or an
object-store URL, read at start and re-read on SIGHUP.

A store is never polled (listing a bucket every few seconds costs requests and money for changes
that an operator can announce with SIGHUP), and its re-read runs on a thread of its own: a slow or
unreachable store must not stall the supervisor's loop, which restarts children and kills stalled
devices.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from sie.catalog import Catalog, load_catalog, read_model_texts, select_catalog
from sie.model_config import ModelConfigError
from sie.object_store import ObjectStoreError, is_remote, local_path, read_yaml_files
from sie.supervisor.watch import ModelsDirWatch


class CatalogSource:
    def __init__(self, models_dir: str | None, include: list[str] | None, *, watch: bool) -> None:
        self.url = models_dir if is_remote(models_dir) else None
        self.directory = local_path(models_dir) if models_dir and self.url is None else None
        self.include = include
        self._watch = ModelsDirWatch(self.directory) if watch and self.url is None else None
        self._reading: _Reread | None = None
        self._again = False

    def read(self) -> Catalog:
        """Read it now (ModelConfigError when it cannot be read at all)."""
        if self.url is None:
            return load_catalog(self.directory, self.include)
        try:
            texts = read_yaml_files(self.url)
        except ObjectStoreError as exc:
            raise ModelConfigError(str(exc)) from None
        return select_catalog(*read_model_texts(texts), self.include)

    def fresh(self, requested: bool) -> Catalog | None:
        """A newly read catalog once one is due and read (SIGHUP, or a watched file changed), else
        None; ModelConfigError when that read failed."""
        if self.url is None:
            changed = self._watch is not None and self._watch.changed()
            return self.read() if requested or changed else None
        if requested:
            if self._reading is None:
                self._reading = _Reread(self.read)
            else:
                self._again = True  # the store may have changed after the read under way began
        reading = self._reading
        if reading is None or not reading.done.is_set():
            return None
        self._reading = _Reread(self.read) if self._again else None
        self._again = False
        if reading.error is not None:
            raise reading.error
        return reading.result


class _Reread:
    """One read of the store on a daemon thread (one that hangs never holds up the server's exit)."""

    def __init__(self, read: Callable[[], Catalog]) -> None:
        self.done = threading.Event()
        self.result: Catalog | None = None
        self.error: ModelConfigError | None = None
        self._read = read
        threading.Thread(target=self._run, name="sie-catalog-reread", daemon=True).start()

    def _run(self) -> None:
        try:
            self.result = self._read()
        except ModelConfigError as exc:
            self.error = exc
        except Exception as exc:  # any other failure of the store's library is a failed re-read too
            self.error = ModelConfigError(f"{type(exc).__name__}: {exc}")
        finally:
            self.done.set()
