"""What every request handler of a frontend shares: settings, catalog, tokenizers and devices."""

from __future__ import annotations

from dataclasses import dataclass, field

from sie.catalog import Catalog
from sie.errors import ModelLoadFailed, ModelNotFound
from sie.frontend.devices import Devices
from sie.frontend.media.workers import MediaWorkers
from sie.frontend.observe import note_model
from sie.frontend.operations import Operations
from sie.frontend.tokenize import TokenizerCache
from sie.model_config import ModelConfig
from sie.settings import Settings
from sie.shared_catalog import CatalogFeed
from sie.shm.control import ModelState
from sie.version import SIE_PROTOCOL_VERSION

# A model's text state (tokenizers, prompt tables, page recipes) leaves a frontend once no device
# holds the model and this frontend has not used it for this long: with many models in rotation it
# would otherwise grow with every model ever served. A reload warms it again while the weights load.
TEXT_STATE_IDLE_S = 300.0


@dataclass(slots=True)
class FrontendState:
    settings: Settings
    catalog: Catalog
    devices: Devices
    tokenizers: TokenizerCache = field(default_factory=TokenizerCache)
    preload_slots: list[int] = field(default_factory=list)
    is_draining: bool = False
    server_version: str = SIE_PROTOCOL_VERSION  # x-sie-server-version: the protocol, see sie.version
    ops: Operations = field(default_factory=Operations)  # authentication, statistics, tracing
    media: MediaWorkers = field(init=False)  # decoding images and audio, --media-threads of them
    feed: CatalogFeed | None = None  # the supervisor's live catalog (None: a fixed one, in tests)

    def __post_init__(self) -> None:
        self.media = MediaWorkers(self.settings.media_threads)

    def refresh_catalog(self) -> None:
        """Take the supervisor's new catalog if the models directory changed (one integer read if not)."""
        fresh = self.feed.changed() if self.feed is not None else None
        if fresh is None:
            return
        old = self.catalog
        self.catalog = fresh
        for name in old.names():
            if name not in fresh or fresh.slot(name) != old.slot(name):
                self.tokenizers.forget(name)  # changed or removed: its next request reads the files anew
        if self.ops.sources is not None:
            self.ops.sources.models[:] = fresh.slot_names()

    def release_idle_text_state(self, idle_s: float = TEXT_STATE_IDLE_S) -> list[str]:
        """Forget the text state of models idle here for `idle_s` that no device holds or is loading,
        preloaded ones aside; the names forgotten."""
        held = (ModelState.LOADED, ModelState.LOADING)
        released = []
        for name in self.tokenizers.idle_models(idle_s):
            if name in self.catalog:
                slot = self.catalog.slot(name)
                if slot in self.preload_slots or self.devices.model_state(slot) in held:
                    continue
            self.tokenizers.forget(name)
            released.append(name)
        return released

    def model(self, name: str) -> tuple[int, ModelConfig]:
        """The slot and config of the model a request names (a profile-qualified id names its model;
        `target.bind` reads the profile from the id)."""
        self.refresh_catalog()
        served = self.catalog.named(name)
        if served is None:
            unsupported = self.catalog.unsupported.get(name) or self.catalog.unsupported.get(
                name.rpartition(":")[0]
            )
            if unsupported is not None:
                raise ModelLoadFailed(f"Model '{name}' cannot be served by this server: {unsupported.reason}")
            raise ModelNotFound(name)
        slot = self.catalog.slot(served)
        note_model(slot, name)  # the request's model, for /metrics and tracing
        return slot, self.catalog.get(served)
