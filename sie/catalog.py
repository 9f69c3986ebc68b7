"""The catalog: every model file of a models directory read once, each served model in a numbered
slot, and the files this server cannot serve with the reason; and which models load at start.

The supervisor reads the directory once and hands the same `Catalog` to every child (see
`sie.shared_catalog`), so a model's slot names the same model on both sides of the rings for the
server's whole life, whatever happens to the directory meanwhile.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from functools import partial
from pathlib import Path

import msgspec
import yaml

from sie.model_config import (
    ModelConfig,
    ModelConfigError,
    load_model_file,
    load_model_text,
    parse_yaml,
    profile_suffixes,
    profile_variants,
)
from sie.model_location import weights_present

BUILTIN_MODELS_DIR = Path(__file__).parent / "models"


class UnsupportedModel(msgspec.Struct, frozen=True):
    """A model file this server read but cannot serve, and why (listed by /v1/models)."""

    sie_id: str
    source: str
    reason: str


class Catalog:
    """Every configured model, in a fixed order both sides agree on, and the files left out.

    A model's index in `models` is its slot, the number both sides of the rings use. Slots are never
    reused: when the directory changes, a new or changed model takes a new slot and the old one is
    retired (still known by slot, so requests already queued finish on it; no longer by name)."""

    def __init__(
        self,
        models: list[ModelConfig],
        *,
        keep_order: bool = False,
        unsupported: list[UnsupportedModel] | None = None,
        active: list[int] | None = None,
    ) -> None:
        # Sorted when read from a directory; `keep_order` for a catalog handed down by the supervisor,
        # whose order is the numbering every process must share.
        self.models = list(models) if keep_order else sorted(models, key=lambda m: m.sie_id)
        live = range(len(self.models)) if active is None else active
        self._slots = {self.models[i].sie_id: i for i in live}
        if len(self._slots) != len(live):
            raise ModelConfigError("two model files declare the same sie_id")
        self.unsupported = {u.sie_id: u for u in unsupported or [] if u.sie_id not in self._slots}

    def __len__(self) -> int:
        """Slots, retired ones included."""
        return len(self.models)

    def __contains__(self, name: object) -> bool:
        return name in self._slots

    def slot(self, name: str) -> int:
        return self._slots[name]

    def named(self, name: str) -> str | None:
        """The served model a request's id names: the id itself, or the model of a profile-qualified
        id, `<id>:<profile>` (SIE's variant ids; here the model's one instance serves them)."""
        if name in self._slots:
            return name
        base, colon, profile = name.rpartition(":")
        if colon and base in self._slots and profile in profile_suffixes(self.get(base)):
            return base
        return None

    def get(self, name: str) -> ModelConfig:
        return self.models[self._slots[name]]

    def names(self) -> list[str]:
        """The models served now, in slot order."""
        return [m.sie_id for m in self.active_models()]

    def active_slots(self) -> list[int]:
        return sorted(self._slots.values())

    def active_models(self) -> list[ModelConfig]:
        return [self.models[i] for i in self.active_slots()]

    def slot_names(self) -> list[str | None]:
        """Each slot's model id, None where the slot is retired."""
        names: list[str | None] = [None] * len(self.models)
        for name, slot in self._slots.items():
            names[slot] = name
        return names

    def revised(self, models: list[ModelConfig], unsupported: list[UnsupportedModel]) -> Catalog:
        """The catalog after the directory changed: unchanged models keep their slots, new and changed
        ones take new slots at the end, removed ones are retired."""
        slots = list(self.models)
        active: list[int] = []
        for config in sorted(models, key=lambda m: m.sie_id):
            old = self._slots.get(config.sie_id)
            if old is not None and slots[old] == config:
                active.append(old)
            else:
                active.append(len(slots))
                slots.append(config)
        return Catalog(slots, keep_order=True, unsupported=unsupported, active=active)


def read_models_dir(directory: Path) -> tuple[list[ModelConfig], list[UnsupportedModel]]:
    """Every `*.yaml` in the directory: the models it serves, and those it cannot with the reason.

    One bad file never stops the rest; a second file claiming an id already taken is left out."""
    files = sorted(directory.glob("*.yaml"))
    return _collect((str(path), partial(load_model_file, path), None) for path in files)


def read_model_texts(texts: Mapping[str, str]) -> tuple[list[ModelConfig], list[UnsupportedModel]]:
    """The same for YAML texts read elsewhere (an object store), keyed by the URL each came from."""
    return _collect((source, partial(load_model_text, text, source), text) for source, text in texts.items())


def _collect(
    files: Iterable[tuple[str, Callable[[], ModelConfig], str | None]],
) -> tuple[list[ModelConfig], list[UnsupportedModel]]:
    models: dict[str, ModelConfig] = {}
    unsupported: list[UnsupportedModel] = []
    for source, load, text in files:
        try:
            config = load()
        except ModelConfigError as exc:
            unsupported.append(UnsupportedModel(_declared_id(source, text), source, str(exc)))
            continue
        for served in (config, *profile_variants(config)):
            if served.sie_id in models:
                reason = f"{source}: sie_id '{served.sie_id}' is already declared by another file"
                unsupported.append(UnsupportedModel(served.sie_id, source, reason))
                continue
            models[served.sie_id] = served
    return list(models.values()), unsupported


def _declared_id(source: str, text: str | None) -> str:
    """The sie_id a file declares, read leniently (for naming a file that failed to load)."""
    try:
        raw = parse_yaml(text if text is not None else Path(source).read_text())
    except (OSError, yaml.YAMLError, UnicodeDecodeError):
        raw = None
    declared = raw.get("sie_id") if isinstance(raw, Mapping) else None
    stem = source.rsplit("/", 1)[-1].removesuffix(".yaml")
    return declared if isinstance(declared, str) and declared else stem.replace("__", "/")


def load_catalog(models_dir: str | Path | None = None, include: list[str] | None = None) -> Catalog:
    """Read every `*.yaml` in the directory (the built-in one by default); keep only `include`."""
    directory = Path(models_dir) if models_dir else BUILTIN_MODELS_DIR
    if not directory.is_dir():
        raise ModelConfigError(f"models directory {directory} does not exist")
    return select_catalog(*read_models_dir(directory), include)


def select_catalog(
    models: list[ModelConfig], unsupported: list[UnsupportedModel], include: list[str] | None = None
) -> Catalog:
    """The catalog of the models read, keeping only `include` (each of which must be among them)."""
    if include:
        known = {m.sie_id for m in models} | {u.sie_id for u in unsupported}
        missing = [name for name in include if name not in known]
        if missing:
            raise ModelConfigError(f"--models names unknown models: {', '.join(missing)}")
        models = [m for m in models if m.sie_id in include]
        unsupported = [u for u in unsupported if u.sie_id in include]
    return Catalog(models, unsupported=unsupported)


# Loaded with the default model when --preload is not given, so that a server started with no
# arguments answers dense and sparse requests at once (SPLADE-tiny loads in well under a second).
DEFAULT_SPARSE_MODEL = "sie/splade-tiny"


def preload_names(preload: list[str] | None, default_model: str, catalog: Catalog) -> list[str]:
    """Models to load at start: the explicit list, else the default models that are served and whose
    weights are here (a models directory of SIE's names MiniLM by its Hub id: without its weights in
    the cache, preloading it would hold readiness back forever)."""
    if preload:
        refused = [
            f"{name} ({catalog.unsupported[name].reason})" for name in preload if name in catalog.unsupported
        ]
        if refused:
            raise ModelConfigError(f"--preload names models this server cannot serve: {'; '.join(refused)}")
        named = {name: catalog.named(name) for name in preload}
        missing = [name for name, model in named.items() if model is None]
        if missing:
            raise ModelConfigError(f"--preload names unknown models: {', '.join(missing)}")
        return list(dict.fromkeys(model for model in named.values() if model is not None))
    defaults = dict.fromkeys((default_model, DEFAULT_SPARSE_MODEL))
    return [name for name in defaults if name in catalog and weights_present(catalog.get(name))]
