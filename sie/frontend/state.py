"""What every request handler of a frontend shares: settings, catalog, tokenizers and devices."""

from __future__ import annotations

from dataclasses import dataclass, field

from sie.errors import ModelNotFound
from sie.frontend.devices import Devices
from sie.frontend.tokenize import TokenizerCache
from sie.model_config import Catalog, ModelConfig
from sie.settings import Settings

SERVER_VERSION = "0.1.0"


@dataclass(slots=True)
class FrontendState:
    settings: Settings
    catalog: Catalog
    devices: Devices
    tokenizers: TokenizerCache = field(default_factory=TokenizerCache)
    preload_slots: list[int] = field(default_factory=list)
    is_draining: bool = False
    server_version: str = SERVER_VERSION

    def model(self, name: str) -> tuple[int, ModelConfig]:
        if name not in self.catalog:
            raise ModelNotFound(name)
        return self.catalog.slot(name), self.catalog.get(name)
