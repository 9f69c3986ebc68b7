"""Model configuration: one YAML file per model in a models directory, and the catalog of them.

The schema follows SIE's (`sie_id`, `hf_id`, `inputs`, `tasks`, `max_sequence_length`, `profiles`
with `max_batch_tokens` and `adapter_options`), with two changes: a profile names an adapter family
(`adapter: dense`) instead of a Python path, and a `weights` block says where the files are when
they do not come from the Hugging Face cache (a local path, or a folder inside an installed package).

The supervisor reads the directory once and hands the same `Catalog` to every child (see
`sie.shared_catalog`), so a model's index in it (its "slot") names the same model on both sides of
the rings for the server's whole life, whatever happens to the directory meanwhile.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import msgspec
import yaml

BUILTIN_MODELS_DIR = Path(__file__).parent / "models"
# Which families serve which task besides encode (a YAML's `tasks` lists the encode outputs).
CROSS_ENCODER_FAMILIES = frozenset({"cross_encoder"})
LATE_INTERACTION_FAMILIES = frozenset({"colbert", "hybrid"})
EXTRACT_FAMILIES = frozenset({"token_classification", "gliner", "nli_zero_shot", "owlv2", "whisper"})
# What each family's forward can take (what /v1/models lists as `inputs`); the others read text only.
FAMILY_INPUTS: dict[str, tuple[str, ...]] = {
    "clip": ("text", "image"),
    "owlv2": ("image",),
    "whisper": ("audio",),
}
DEFAULT_MAX_BATCH_TOKENS = 16384


class ModelConfigError(ValueError):
    """A model YAML file is malformed or names weights that cannot be found."""


class DenseOutput(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    dim: int


class SparseOutput(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    dim: int | None = None


class MultivectorOutput(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    dim: int


class EncodeTask(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    dense: DenseOutput | None = None
    sparse: SparseOutput | None = None
    multivector: MultivectorOutput | None = None

    def output_types(self) -> list[str]:
        pairs = (("dense", self.dense), ("sparse", self.sparse), ("multivector", self.multivector))
        return [name for name, spec in pairs if spec is not None]


class Tasks(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    encode: EncodeTask | None = None
    score: dict[str, Any] | None = None
    extract: dict[str, Any] | None = None


class Inputs(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    text: bool = True
    image: bool = False
    audio: bool = False
    video: bool = False


class Weights(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Where the files are. `path` wins, then `package`; with neither, `hf_id` in the HF cache."""

    path: str | None = None
    package: str | None = None
    package_path: str = ""


class RuntimeOptions(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Options read at request time. Each family reads the ones it names; None = the family's
    default, usually read from the model's own files (config.json, tokenizer)."""

    pooling: Literal["cls", "mean", "last"] = "mean"
    normalize: bool = True
    query_template: str | None = None
    doc_template: str | None = None
    # cross_encoder / nli_zero_shot: "sigmoid", "softmax" or "identity" (None: as sentence-transformers
    # decides from config.json); NLI's hypothesis template and its entailment label.
    activation: Literal["sigmoid", "softmax", "identity"] | None = None
    hypothesis_template: str = "This example is {}."
    entailment_label: str | None = None
    # colbert: marker tokens, query length (queries are expanded with [MASK] to it), whether the
    # expansion tokens are attended to, and MUVERA settings applied when no request asks.
    query_prefix: str | None = None
    document_prefix: str | None = None
    query_length: int | None = None
    attend_to_expansion_tokens: bool | None = None
    skiplist_words: list[str] | None = None
    muvera: dict[str, Any] | None = None
    # gliner / token_classification: score threshold and labels ignored in the output; a tagger
    # that marks every sub-word B- (Rampart) needs touching pieces of one type joined into one span.
    threshold: float | None = None
    ignore_labels: list[str] | None = None
    join_touching: bool = False


class AdapterOptions(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    loadtime: dict[str, Any] = {}
    runtime: RuntimeOptions = RuntimeOptions()


class Profile(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    max_batch_tokens: int = DEFAULT_MAX_BATCH_TOKENS
    compute_precision: Literal["float32", "float16", "bfloat16"] | None = None
    adapter: str = "dense"
    adapter_options: AdapterOptions = AdapterOptions()


class ModelConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    sie_id: str
    hf_id: str | None = None
    hf_revision: str | None = None
    weights: Weights = Weights()
    inputs: Inputs = Inputs()
    tasks: Tasks = Tasks()
    max_sequence_length: int | None = None
    profiles: dict[str, Profile] = {}
    # LoRA adapters a request may name (`options.lora`): name -> local PEFT adapter folder. Relative
    # paths are taken from the YAML file's folder.
    loras: dict[str, str] = {}

    @property
    def default_profile_name(self) -> str:
        return "default" if "default" in self.profiles or not self.profiles else next(iter(self.profiles))

    def profile(self, name: str | None = None) -> Profile:
        """The named profile (or the default one); a model with no profiles gets defaults."""
        key = name or self.default_profile_name
        if not self.profiles and key == "default":
            return Profile()
        try:
            return self.profiles[key]
        except KeyError:
            raise KeyError(key) from None

    def output_types(self) -> list[str]:
        return self.tasks.encode.output_types() if self.tasks.encode else []

    @property
    def family(self) -> str:
        """The default profile's adapter family (every profile of a model shares its weights)."""
        return self.profile().adapter

    def supports_score(self) -> bool:
        """Cross-encoders score pairs; multi-vector models score by MaxSim."""
        if self.family in CROSS_ENCODER_FAMILIES:
            return True
        return self.family in LATE_INTERACTION_FAMILIES and "multivector" in self.output_types()

    def supports_extract(self) -> bool:
        return self.family in EXTRACT_FAMILIES

    def input_kinds(self) -> tuple[str, ...]:
        """The modalities this model's items may carry, decided by its family (a YAML's `inputs`
        block cannot make a text encoder see images)."""
        return FAMILY_INPUTS.get(self.family, ("text",))

    def dense_dim(self) -> int | None:
        encode = self.tasks.encode
        return encode.dense.dim if encode and encode.dense else None


def parse_model_config(raw: Mapping[str, Any], source: str = "<memory>") -> ModelConfig:
    """Validate one model's mapping, resolving `extends` between profiles first.

    A top-level `adapter: NAME` is shorthand for a single default profile of that family.
    """
    data = dict(raw)
    adapter = data.pop("adapter", None)
    profiles = dict(data.get("profiles") or {})
    if adapter is not None:
        if profiles:
            raise ModelConfigError(f"{source}: give `adapter` at the top level or in profiles, not both")
        profiles = {"default": {"adapter": adapter}}
    data["profiles"] = _resolve_profile_extends(profiles, source)
    try:
        return msgspec.convert(data, ModelConfig)
    except msgspec.ValidationError as exc:
        raise ModelConfigError(f"{source}: {exc}") from None


def _resolve_profile_extends(profiles: dict[str, Any], source: str) -> dict[str, Any]:
    resolved: dict[str, Any] = {}

    def resolve(name: str, seen: tuple[str, ...]) -> dict[str, Any]:
        if name in resolved:
            return resolved[name]
        if name in seen or name not in profiles:
            raise ModelConfigError(f"{source}: profile '{name}' extends a missing profile or a cycle")
        body = dict(profiles[name] or {})
        parent = body.pop("extends", None)
        merged = _deep_merge(resolve(parent, (*seen, name)), body) if parent else body
        resolved[name] = merged
        return merged

    for name in profiles:
        resolve(name, ())
    return resolved


def _deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def load_model_file(path: Path) -> ModelConfig:
    with path.open() as fh:
        raw = yaml.safe_load(fh)
    if not isinstance(raw, Mapping):
        raise ModelConfigError(f"{path}: expected a mapping at the top level")
    config = parse_model_config(raw, str(path))
    if not config.loras:
        return config
    loras = {
        name: str((path.parent / Path(folder).expanduser()).resolve())
        for name, folder in config.loras.items()
    }
    return msgspec.structs.replace(config, loras=loras)


class Catalog:
    """Every configured model, in a fixed order both sides agree on."""

    def __init__(self, models: list[ModelConfig], *, keep_order: bool = False) -> None:
        # Sorted when read from a directory; `keep_order` for a catalog handed down by the supervisor,
        # whose order is the numbering every process must share.
        self.models = list(models) if keep_order else sorted(models, key=lambda m: m.sie_id)
        self._slots = {m.sie_id: i for i, m in enumerate(self.models)}
        if len(self._slots) != len(self.models):
            raise ModelConfigError("two model files declare the same sie_id")

    def __len__(self) -> int:
        return len(self.models)

    def __contains__(self, name: object) -> bool:
        return name in self._slots

    def slot(self, name: str) -> int:
        return self._slots[name]

    def get(self, name: str) -> ModelConfig:
        return self.models[self._slots[name]]

    def names(self) -> list[str]:
        return [m.sie_id for m in self.models]


def load_catalog(models_dir: str | Path | None = None, include: list[str] | None = None) -> Catalog:
    """Read every `*.yaml` in the directory (the built-in one by default); keep only `include`."""
    directory = Path(models_dir) if models_dir else BUILTIN_MODELS_DIR
    if not directory.is_dir():
        raise ModelConfigError(f"models directory {directory} does not exist")
    models = [load_model_file(p) for p in sorted(directory.glob("*.yaml"))]
    if include:
        known = {m.sie_id for m in models}
        missing = [name for name in include if name not in known]
        if missing:
            raise ModelConfigError(f"--models names unknown models: {', '.join(missing)}")
        models = [m for m in models if m.sie_id in include]
    return Catalog(models)


def resolve_weights_dir(config: ModelConfig) -> Path:
    """The local folder holding config.json, the weights and tokenizer.json. Never downloads."""
    weights = config.weights
    if weights.path:
        folder = Path(weights.path).expanduser()
    elif weights.package:
        folder = _package_dir(weights.package) / weights.package_path
    elif config.hf_id:
        folder = _hf_cache_snapshot(config.hf_id, config.hf_revision)
    else:
        raise ModelConfigError(f"model '{config.sie_id}' names no weights (weights.path/package or hf_id)")
    if not folder.is_dir():
        raise ModelConfigError(f"model '{config.sie_id}': weights folder {folder} does not exist")
    return folder


def _package_dir(package: str) -> Path:
    # find_spec locates the package without importing it (some model packages import torch).
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ModelConfigError(f"Python package '{package}' holding model weights is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


def _hf_cache_snapshot(hf_id: str, revision: str | None) -> Path:
    """The cached snapshot of `hf_id`; downloaded first only where the Hub may be reached.

    The supervisor turns SIE_LOCAL_CACHE / SIE_HF_FALLBACK into Hugging Face's own HF_HUB_CACHE /
    HF_HUB_OFFLINE for its children (sie.supervisor.children), which is what this reads.
    """
    hub = os.environ.get("HF_HUB_CACHE") or str(
        Path(os.environ.get("HF_HOME", "~/.cache/huggingface")).expanduser() / "hub"
    )
    repo = Path(hub).expanduser() / ("models--" + hf_id.replace("/", "--"))
    ref = revision or "main"
    ref_file = repo / "refs" / ref
    commit = ref_file.read_text().strip() if ref_file.is_file() else ref
    snapshot = repo / "snapshots" / commit
    if snapshot.is_dir():
        return snapshot
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        raise ModelConfigError(
            f"'{hf_id}' is not in the local Hugging Face cache ({repo}); "
            "set SIE_HF_FALLBACK=true to download it from the Hub"
        )
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(hf_id, revision=revision, cache_dir=hub))


# Loaded with the default model when --preload is not given, so that a server started with no
# arguments answers dense and sparse requests at once (SPLADE-tiny loads in well under a second).
DEFAULT_SPARSE_MODEL = "sie/splade-tiny"


def preload_names(preload: list[str] | None, default_model: str, catalog: Catalog) -> list[str]:
    """Models to load at start: the explicit list, else the default models that are served."""
    if preload:
        missing = [name for name in preload if name not in catalog]
        if missing:
            raise ModelConfigError(f"--preload names unknown models: {', '.join(missing)}")
        return list(preload)
    return [name for name in dict.fromkeys((default_model, DEFAULT_SPARSE_MODEL)) if name in catalog]
