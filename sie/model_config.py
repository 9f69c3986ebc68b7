"""Model configuration: the schema of one model's YAML file, parsed and checked.

The schema follows SIE's (`sie_id`, `hf_id`, `inputs`, `tasks`, `max_sequence_length`, `profiles`
with `max_batch_tokens` and `adapter_options`), with two changes: a profile names an adapter family
(`adapter: dense`) instead of a Python path, and a `weights` block says where the files are when
they do not come from the Hugging Face cache (a local path, or a folder inside an installed package).
A models directory of such files is `sie.catalog`'s; where a model's files are on disk is
`sie.model_location`'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import msgspec
import yaml

from sie.families import FAMILIES

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


# libyaml's parser where PyYAML was built with it: the same values as yaml.safe_load, read about 8x
# faster, which is most of the time a start or a catalog re-read spends on two hundred files.
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def parse_yaml(text: str) -> Any:
    """One YAML document, read as yaml.safe_load reads it (yaml.YAMLError when it is not YAML)."""
    return yaml.load(text, Loader=_SAFE_LOADER)


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
        raw = parse_yaml(text)
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
