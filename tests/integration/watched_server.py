"""One running server that several test files share by adding their models to it: the server
watches its models directory, so a file writes its YAML (and, for a model read by SIE's id, its
tiny checkpoint into the server's local Hugging Face cache) and waits until the model answers."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.integration.server import Server, wait_until

LOAD_TIMEOUT_S = 180.0
# Small enough that a test can send a page over it: 1001 x 1000 pixels is refused.
MAX_IMAGE_PIXELS = 1_000_000


@dataclass(frozen=True)
class WatchedServer:
    server: Server
    models: Path  # the watched --models-dir
    local_cache: Path  # --local-cache, HF_HOME's layout

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def hub(self) -> Path:
        return self.local_cache / "hub"

    def add(self, raw: dict[str, Any]) -> None:
        """Write one model's YAML (ours or SIE's) into the models directory. Its weights go in first,
        so that the server's first read of the file finds them."""
        sie_id = raw["sie_id"]
        (self.models / f"{sie_id.replace('/', '__')}.yaml").write_text(yaml.safe_dump(raw))

    def wait_listed(self, sie_id: str) -> None:
        """Until the server has read the model's file (it is not loaded by this)."""

        def listed() -> bool:
            return httpx.get(f"{self.url}/v1/models/{sie_id}", timeout=10).status_code == 200

        wait_until(listed, LOAD_TIMEOUT_S, f"{sie_id} listed", interval_s=0.25)

    def wait_serving(self, route: str, body: dict[str, Any]) -> None:
        """Until a JSON `body` posted to `route` is answered 200: the file is read (404 before),
        then the model loads on that first request (503 MODEL_LOADING meanwhile). Any other answer
        fails the wait."""

        def answered() -> bool:
            response = httpx.post(self.url + route, json=body, timeout=60)
            assert response.status_code in (200, 404, 503), f"{route}: {response.text}"
            return response.status_code == 200

        wait_until(answered, LOAD_TIMEOUT_S, f"{route} serves", interval_s=0.25)
