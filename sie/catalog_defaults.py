"""Server-wide defaults for what a model's YAML leaves open, applied once to the catalog.

`SIE_MAX_BATCH_COST` / `--max-batch-tokens` and `SIE_DEFAULT_COMPUTE_PRECISION` are SIE's
server-level defaults of two per-profile fields. The supervisor applies them before it hands the
catalog to its children, so every process sees the same effective profiles and no adapter needs
to know the settings. A profile that names its own value keeps it.
"""

from __future__ import annotations

import msgspec

from sie.catalog import Catalog
from sie.model_config import DEFAULT_MAX_BATCH_TOKENS, ModelConfig, Profile
from sie.settings import Settings


def with_server_defaults(catalog: Catalog, settings: Settings) -> Catalog:
    if settings.max_batch_tokens is None and settings.default_compute_precision is None:
        return catalog
    models = [_model(m, settings) for m in catalog.models]
    return Catalog(
        models, keep_order=True, unsupported=list(catalog.unsupported.values()), active=catalog.active_slots()
    )


def _model(config: ModelConfig, settings: Settings) -> ModelConfig:
    profiles = config.profiles or {"default": Profile()}
    updated = {name: _profile(p, settings) for name, p in profiles.items()}
    return msgspec.structs.replace(config, profiles=updated)


def _profile(profile: Profile, settings: Settings) -> Profile:
    changes: dict[str, object] = {}
    # A profile whose budget is the built-in default left it unset (the YAML schema has no "unset").
    if settings.max_batch_tokens is not None and profile.max_batch_tokens == DEFAULT_MAX_BATCH_TOKENS:
        changes["max_batch_tokens"] = settings.max_batch_tokens
    if settings.default_compute_precision is not None and profile.compute_precision is None:
        changes["compute_precision"] = settings.default_compute_precision
    return msgspec.structs.replace(profile, **changes) if changes else profile
