"""A model's weights folder for a load, and the other checkpoints it reads (sie.companions), with a
cluster cache configured: each from the local Hugging Face cache, else a copy of the snapshot from
the cluster cache into it, else (only with --hf-fallback) the Hub.

Runs on the device's loader thread, so the model reads LOADING (503 MODEL_LOADING with Retry-After)
for as long as a copy takes, and other models keep serving. The model's lock is held shared while
its files are read into the device, exclusive while they are copied: two devices that both want
a model copy it once (the second waits, then finds it), and the disk cache never deletes a folder
that a load is reading.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Collection, Iterator
from pathlib import Path

from sie.catalog import Catalog
from sie.companions import companion_repositories
from sie.gpu_proc.cluster_cache import ClusterCache
from sie.gpu_proc.disk_cache import DiskCache
from sie.gpu_proc.hf_cache import RepoLock, touch
from sie.gpu_proc.tokenizer_conversion import convert_tokenizers
from sie.model_config import ModelConfig, ModelConfigError
from sie.model_location import (
    hf_hub_cache,
    hf_snapshot,
    local_snapshot,
    repo_folder,
    resolve_weights_dir,
    tokenizer_repositories,
)
from sie.settings import Settings
from sie.shm.control import ControlBlock, ModelState

log = logging.getLogger(__name__)


@contextlib.contextmanager
def local_weights(config: ModelConfig) -> Iterator[Path]:
    """Without a cluster cache: the folder as model_config finds it (weightless families read none),
    its slow tokenizers converted for the frontends."""
    if config.is_weightless:
        yield Path()
        return
    folder = resolve_weights_dir(config)
    convert_tokenizers(config, folder)
    yield folder


class WeightsSource:
    def __init__(
        self,
        cluster: ClusterCache,
        disk: Callable[[Path], DiskCache],
        in_use: Callable[[], set[str]],
        *,
        hub_allowed: bool,
    ) -> None:
        self.cluster = cluster
        self._disk = disk  # of the cache in force when a load runs (HF_HUB_CACHE)
        self._in_use = in_use  # model folders the disk cache must keep
        self.hub_allowed = hub_allowed

    @contextlib.contextmanager
    def open(self, config: ModelConfig) -> Iterator[Path]:
        """The model's folder, held against deletion until the block ends."""
        weights = config.weights
        if config.is_weightless or weights.path or weights.package or not config.hf_id:
            with local_weights(config) as folder:
                yield folder
            return
        with contextlib.ExitStack() as held:
            folder = held.enter_context(self._held(config.hf_id, config.hf_revision))
            # The other checkpoints its adapter reads (a union's members, a LoRA's base), held as
            # long as its own; one that cannot be had fails the load, naming it.
            for hf_id, revision in companion_repositories(config, folder).items():
                held.enter_context(self._held(hf_id, revision))
            # Even beside the folder's own tokenizer.json: a GLiNER bi-encoder's labels tokenizer.
            self._fetch_tokenizers(config, folder)
            convert_tokenizers(config, folder)
            yield folder

    def _fetch_tokenizers(self, config: ModelConfig, folder: Path) -> None:
        """The repositories whose tokenizer the frontends read for this model (from the local cache,
        once it loaded); one that cannot be had fails there, naming it, not here."""
        for hf_id, revision in tokenizer_repositories(config, folder).items():
            if Path(hf_id).expanduser().is_dir():  # an encoder named by a local folder
                continue
            try:
                with self._held(hf_id, revision):
                    pass
            except ModelConfigError as exc:
                log.warning("tokenizer repository not fetched", extra={"model": hf_id, "error": str(exc)})

    @contextlib.contextmanager
    def _held(self, hf_id: str, revision: str | None) -> Iterator[Path]:
        cache = hf_hub_cache()
        repo = repo_folder(hf_id)
        with RepoLock(cache, repo) as lock:
            lock.shared()
            folder = local_snapshot(hf_id, revision, cache)
            if folder is None:
                lock.exclusive()
                folder = local_snapshot(hf_id, revision, cache) or self._fetch(hf_id, revision, cache)
                lock.shared()
            touch(cache, repo)
            yield folder

    def _fetch(self, hf_id: str, revision: str | None, cache: Path) -> Path:
        """Under the model's exclusive lock: copy it from the cluster cache, else ask the Hub."""
        try:
            snapshot = self.cluster.find(hf_id, revision)
        except Exception as exc:  # the store's own errors (credentials, network) carry the reason
            error = exc if isinstance(exc, ModelConfigError) else _store_error(self.cluster.url, exc)
            if not self.hub_allowed:
                raise error from None
            log.warning("cluster cache failed; asking the Hub", extra={"model": hf_id, "error": str(error)})
            snapshot = None
        if snapshot is not None:
            keep = self._in_use() | {snapshot.repo}
            self._disk(cache).make_room(snapshot.missing_bytes(cache), keep, hf_id)
            try:
                return self.cluster.copy(snapshot, cache)
            except ModelConfigError:
                raise
            except Exception as exc:  # a copy cut short is resumed by the next load
                raise ModelConfigError(
                    f"copying {snapshot.url} failed (the next load resumes it): {type(exc).__name__}: {exc}"
                ) from None
        if self.hub_allowed:
            return hf_snapshot(hf_id, revision)
        at = f"revision {revision}" if revision else "its main branch"
        raise ModelConfigError(
            f"upload it to the cluster cache as {self.cluster.url}/{repo_folder(hf_id)}/snapshots/COMMIT "
            f"(with refs/main), or start with --hf-fallback to download it: '{hf_id}' ({at}) is in neither "
            f"the local cache {cache} nor the cluster cache"
        )


def _local_companions(config: ModelConfig) -> list[str]:
    """The companions of a model whose own snapshot is in the local cache (a busy model's is)."""
    if not config.hf_id or config.weights.path or config.weights.package:
        return []
    folder = local_snapshot(config.hf_id, config.hf_revision, hf_hub_cache())
    if folder is None:
        return []
    try:
        return list(companion_repositories(config, folder))
    except ModelConfigError:
        return []


def _store_error(url: str, exc: Exception) -> ModelConfigError:
    return ModelConfigError(f"the cluster cache {url} could not be read: {type(exc).__name__}: {exc}")


# A model in one of these states on any device has its files in use.
BUSY = (ModelState.LOADING, ModelState.LOADED, ModelState.UNLOADING)


def cluster_weights(
    settings: Settings, catalog: Callable[[], Catalog], control: ControlBlock, pinned: Collection[int]
) -> WeightsSource:
    """The weights source of a device process: the settings' cluster and disk caches, and the models
    the disk cache keeps (those of `pinned` slots and those busy on any device, read from `control`)."""

    def in_use() -> set[str]:
        models = catalog().models
        busy = set(pinned) | {
            slot
            for device in range(control.n_devices)
            for slot in range(len(models))
            if control.model_state(device, slot) in BUSY
        }
        repos: set[str] = set()
        for slot in busy:
            config = models[slot]
            names = [config.hf_id] if config.hf_id else []
            names += [*config.hf_tokenizer_dependencies, *_local_companions(config)]
            repos.update(repo_folder(name) for name in names)
        return repos

    def disk(cache: Path) -> DiskCache:
        return DiskCache(
            cache,
            enabled=settings.disk_cache_enabled,
            threshold_percent=settings.disk_pressure_threshold_percent,
            capacity_bytes=settings.local_cache_bytes,
        )

    if settings.cluster_cache is None:
        raise ValueError("cluster_weights needs a cluster cache")
    return WeightsSource(ClusterCache(settings.cluster_cache), disk, in_use, hub_allowed=settings.hf_fallback)
