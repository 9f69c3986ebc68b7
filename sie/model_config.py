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
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from pathlib import Path
from typing import Any, Literal

import msgspec
import yaml

from sie.families import FAMILIES
from sie.tokenizer_files import describe_missing, find_tokenizer_json

BUILTIN_MODELS_DIR = Path(__file__).parent / "models"
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
    # SIE's instructions: `{instruction}` in a template takes the request's instruction, else the
    # profile's `instruction`, else (queries only) `default_instruction`.
    instruction: str | None = None
    default_instruction: str | None = None
    # What a request that names no output_types gets from this profile (None: dense), and the
    # similarity each output is meant for (reported by /v1/models, as SIE does).
    output_types: list[Literal["dense", "sparse", "multivector"]] | None = None
    output_similarity: dict[str, Literal["cosine", "dot", "l2"]] | None = None
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
    document_length: int | None = None
    do_query_expansion: bool | None = None
    attend_to_expansion_tokens: bool | None = None
    skiplist_words: list[str] | None = None
    muvera: dict[str, Any] | None = None
    muvera_config: dict[str, Any] | None = None  # SIE's: MUVERA settings when a request or profile asks
    # SMVE (sparse from the token vectors, sie.frontend.smve): on when not None, as `muvera`; and
    # SIE's model-wide settings for it.
    smve: dict[str, Any] | None = None
    smve_config: dict[str, Any] | None = None
    # gliner / token_classification: score threshold and labels ignored in the output; a tagger
    # that marks every sub-word B- (Rampart) needs touching pieces of one type joined into one span.
    threshold: float | None = None
    ignore_labels: list[str] | None = None
    text_threshold: float | None = None  # grounding_dino: what a prompt token needs to join a box's phrase
    join_touching: bool = False
    # gliner: join entities of one label that touch or sit one character apart (token-level models
    # such as NuNER Zero tag each word alone); nli_zero_shot: labels scored independently by default.
    merge_adjacent_entities: bool = False
    relation_threshold: float | None = None  # gliner relex: relations' threshold (None: the entity one)
    # context_pruner: a passage token whose keep probability is below `prune_threshold` is pruned,
    # one at or above `highlight_threshold` highlighted (None: SIE's 0.6 and 0.9).
    prune_threshold: float | None = None
    highlight_threshold: float | None = None
    # gliner_union: how the members' spans are composed (sie.gliner_union; None: SIE's default).
    score_floor: float | None = None
    window_words: int | None = None
    window_overlap: int | None = None
    propagate_label: str | None = None
    name_min_letters: int | None = None
    default_labels: list[str] | None = None
    multi_label: bool = False
    # llm_reranker: SIE's prompt recipe (sie.frontend.llm_prompts; None: "mxbai", SIE's default;
    # "native" also makes the device score by the folder's saved LogitScore) and the longest
    # prompt in tokens (None: max_sequence_length).
    input_format: Literal["mxbai", "qwen3", "native"] | None = None
    max_seq_length: int | None = None
    # donut: the task prompt token ("<s_cord-v2>", "<s_docvqa>"), the most tokens one generation
    # adds, and its beam width (greedy only here); a request's options override each.
    task: str | None = None
    max_new_tokens: int | None = None
    num_beams: int | None = None

    def instruction_for(self, requested: str | None, *, is_query: bool) -> str | None:
        """The instruction a text is formatted with: the request's (even ""), else the profile's."""
        if requested is not None:
            return requested
        if self.instruction is not None:
            return self.instruction
        return self.default_instruction if is_query else None


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
    # SIE's `hf_tokenizer_dependencies`: {hf_id: revision} of a repository whose tokenizer files the
    # model uses when its own folder has none (GLiNER checkpoints name their backbone's).
    hf_tokenizer_dependencies: dict[str, str] = {}
    # Facts about an SIE YAML's fields that have no effect here (engine tuning), logged once at start.
    notes: list[str] = []
    # Profiles of an SIE YAML this server cannot serve -> why (a request naming one gets the reason).
    refused_profiles: dict[str, str] = {}

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

    # The three below ask the family's spec (sie.families); an unknown family serves nothing
    # beyond text encode here, and fails when its model loads.
    def supports_score(self) -> bool:
        """Cross-encoders score pairs; multi-vector models score by MaxSim."""
        spec = FAMILIES.get(self.family)
        if spec is None or spec.score is None:
            return False
        return spec.score == "pairs" or "multivector" in self.output_types()

    def supports_extract(self) -> bool:
        spec = FAMILIES.get(self.family)
        return spec is not None and spec.serves_extract

    def input_kinds(self) -> tuple[str, ...]:
        """The modalities this model's items may carry, decided by its family (a YAML's `inputs`
        block cannot make a text encoder see images)."""
        spec = FAMILIES.get(self.family)
        return spec.inputs if spec is not None else ("text",)

    def takes_state_items(self) -> bool:
        """Whether an extract item may carry `metadata.state` in place of text (its family says)."""
        spec = FAMILIES.get(self.family)
        return spec is not None and spec.state_items

    def dense_dim(self) -> int | None:
        encode = self.tasks.encode
        return encode.dense.dim if encode and encode.dense else None

    @property
    def is_weightless(self) -> bool:
        """Its family reads no files (SIE's fake): no weights folder, no tokenizer.json."""
        spec = FAMILIES.get(self.family)
        return spec is not None and spec.weightless


def profile_variants(config: ModelConfig) -> list[ModelConfig]:
    """`<sie_id>:<profile>` for each non-default profile, that profile as its only one (SIE's variant
    expansion), for a family whose profiles differ at load time; [] for the others."""
    spec = FAMILIES.get(config.family)
    if spec is None or not spec.profile_variants:
        return []
    return [
        msgspec.structs.replace(
            config, sie_id=f"{config.sie_id}:{name}", profiles={"default": profile}, refused_profiles={}
        )
        for name, profile in config.profiles.items()
        if name != config.default_profile_name
    ]


def profile_suffixes(config: ModelConfig) -> list[str]:
    """What may follow `<id>:` to name one of the model's profiles: `default` and each profile's
    name, refused ones included (a request for one is told why it is not served)."""
    return ["default", *config.profiles, *config.refused_profiles]


def profile_in_id(name: str, config: ModelConfig) -> str | None:
    """The profile a profile-qualified id names (`default`: the model's default), None for the bare id."""
    if name == config.sie_id or not name.startswith(f"{config.sie_id}:"):
        return None
    named = name[len(config.sie_id) + 1 :]
    return config.default_profile_name if named == "default" else named


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
    """One YAML file, in our format or SIE's (told apart by SIE's `adapter_path`)."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ModelConfigError(f"{path}: not readable as YAML: {exc}") from None
    return load_model_text(text, str(path), path.parent)


def load_model_text(text: str, source: str, folder: Path | None = None) -> ModelConfig:
    """One model's YAML text; `folder` anchors relative LoRA paths (None: the working directory)."""
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ModelConfigError(f"{source}: not readable as YAML: {exc}") from None
    if not isinstance(raw, Mapping):
        raise ModelConfigError(f"{source}: expected a mapping at the top level")
    from sie.sie_yaml import is_sie_format, translate  # deferred: sie_yaml imports this module

    if is_sie_format(raw):
        raw = translate(raw, source)
    config = parse_model_config(raw, source)
    if not config.loras:
        return config
    base = folder or Path.cwd()
    loras = {name: str((base / Path(p).expanduser()).resolve()) for name, p in config.loras.items()}
    return msgspec.structs.replace(config, loras=loras)


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
        raw = yaml.safe_load(text if text is not None else Path(source).read_text())
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


def resolve_weights_dir(config: ModelConfig) -> Path:
    """The local folder holding config.json, the weights and tokenizer.json. Downloads only where
    the supervisor allowed it (--hf-fallback)."""
    folder = _declared_folder(config)
    if folder is None:
        if not config.hf_id:
            raise ModelConfigError(
                f"model '{config.sie_id}' names no weights (weights.path/package or hf_id)"
            )
        folder = hf_snapshot(config.hf_id, config.hf_revision)
    if not folder.is_dir():
        raise ModelConfigError(f"model '{config.sie_id}': weights folder {folder} does not exist")
    return folder


def weights_present(config: ModelConfig) -> bool:
    """Whether the model's files are on this machine now (never downloads)."""
    if config.is_weightless:
        return True
    try:
        folder = _declared_folder(config)
        if folder is None and config.hf_id:
            folder = local_snapshot(config.hf_id, config.hf_revision, hf_hub_cache())
    except (ModelConfigError, OSError, ValueError):  # a package not installed, an invalid repo id
        return False
    return folder is not None and folder.is_dir()


def _declared_folder(config: ModelConfig) -> Path | None:
    """The folder the YAML's `weights` block names (a path, or a folder in a package); None: `hf_id`."""
    weights = config.weights
    if weights.path:
        return Path(weights.path).expanduser()
    if weights.package:
        return _package_dir(weights.package) / weights.package_path
    return None


def resolve_tokenizer_file(config: ModelConfig) -> Path:
    """tokenizer.json (or the one converted from a slow tokenizer: sie.tokenizer_files) from the
    model's folder, else from a repository it names as its tokenizer's (the YAML's
    hf_tokenizer_dependencies, then the encoder its checkpoint names: a family's
    `tokenizer_from_encoder`)."""
    own = resolve_weights_dir(config)
    found = find_tokenizer_file(own)
    if found is not None:
        return found
    looked = [own]
    for name, revision in tokenizer_repositories(config, own).items():
        looked.append(repository_dir(name, revision))
        found = find_tokenizer_file(looked[-1])
        if found is not None:
            return found
    reasons = "; ".join(map(describe_missing, looked))
    raise ModelConfigError(f"model '{config.sie_id}': no tokenizer: {reasons}")


def find_tokenizer_file(folder: Path) -> Path | None:
    """The folder's tokenizer.json, or the one converted from its slow tokenizer; None if neither."""
    return find_tokenizer_json(folder, hf_hub_cache())


def folder_tokenizer_file(folder: Path) -> Path:
    """`find_tokenizer_file`, raising the reason when there is none."""
    found = find_tokenizer_file(folder)
    if found is None:
        raise ModelConfigError(f"no tokenizer: {describe_missing(folder)}")
    return found


def tokenizer_repositories(config: ModelConfig, weights_dir: Path) -> dict[str, str | None]:
    """{name: revision} of the repositories (or local folders) the model's tokenizer may come from
    besides its own folder: the YAML's hf_tokenizer_dependencies, then the encoder its checkpoint
    names when its family reads that encoder's tokenizer (GLiREL), at the revision those pin."""
    found: dict[str, str | None] = dict(config.hf_tokenizer_dependencies)
    spec = FAMILIES.get(config.family)
    if spec is not None and spec.tokenizer_from_encoder is not None:
        encoder = named_encoder(weights_dir / spec.tokenizer_from_encoder)
        found.setdefault(encoder, None)
    return found


def named_encoder(checkpoint_config: Path) -> str:
    """The encoder a checkpoint's config names in `model_name` (a Hub id or a local folder)."""
    try:
        raw = yaml.safe_load(checkpoint_config.read_text())  # JSON, read as its packages read it
    except (OSError, yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ModelConfigError(f"cannot read {checkpoint_config}: {exc}") from None
    name = raw.get("model_name") if isinstance(raw, Mapping) else None
    if not isinstance(name, str) or not name:
        raise ModelConfigError(f"{checkpoint_config} names no encoder (model_name)")
    return name


def repository_dir(name: str, revision: str | None) -> Path:
    """The folder of a tokenizer repository or encoder: `name` itself when it is a local folder (as
    transformers reads it), else its cached snapshot (downloaded only with --hf-fallback)."""
    local = Path(name).expanduser()
    if local.is_dir():
        return local
    return hf_snapshot(name, revision)


def _package_dir(package: str) -> Path:
    # find_spec locates the package without importing it (some model packages import torch).
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ModelConfigError(f"Python package '{package}' holding model weights is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


def hf_hub_cache() -> Path:
    """The Hugging Face cache the children read: the supervisor turns SIE_LOCAL_CACHE into HF_HUB_CACHE."""
    from huggingface_hub import constants

    return Path(os.environ.get("HF_HUB_CACHE") or constants.HF_HUB_CACHE).expanduser()


def local_snapshot(hf_id: str, revision: str | None, cache: Path) -> Path | None:
    """The snapshot folder huggingface_hub's own lookup finds in `cache` (never downloads), or None."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        return Path(snapshot_download(hf_id, revision=revision, cache_dir=cache, local_files_only=True))
    except LocalEntryNotFoundError:
        return None


def hf_snapshot(hf_id: str, revision: str | None) -> Path:
    """The cached snapshot of `hf_id` at `revision`, found by huggingface_hub's own cache lookup;
    downloaded only when HF_HUB_OFFLINE is off (the supervisor sets it unless --hf-fallback)."""
    from huggingface_hub import snapshot_download

    cache = hf_hub_cache()
    found = local_snapshot(hf_id, revision, cache)
    if found is not None:
        return found
    if _offline():
        at = f"revision {revision}" if revision else "its main branch"
        raise ModelConfigError(
            f"'{hf_id}' ({at}) is not in the local Hugging Face cache {cache}. Start with --hf-fallback "
            "(SIE_HF_FALLBACK=true) to download it, point SIE_LOCAL_CACHE at a cache that holds it, or "
            "put it there with "
            f"`hf download {hf_id}{' --revision ' + revision if revision else ''} --cache-dir {cache}`"
        )
    return Path(snapshot_download(hf_id, revision=revision, cache_dir=cache))


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


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
