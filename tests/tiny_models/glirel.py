"""A tiny random-weight GLiREL (zero-shot relation extraction) with MiniLM's real tokenizer, built offline.

GLiREL names its encoder by `model_name` and loads it with transformers' Auto classes; here that is
a local folder holding a tiny DeBERTa-v2 (or BERT) and MiniLM's tokenizer files, so the `glirel`
package builds the same model as for a published checkpoint with nothing fetched. The model is saved
as glirel saves one (pytorch_model.bin, glirel_config.json); the backbone's tokenizer.json is copied
beside them, where this server's frontend finds a model's tokenizer.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from tests.tiny_models.gliner import DEBERTA_EXTRA, ENCODER, TOKENIZER_FILES

MAX_LEN = 40  # words per text: small, so tests reach GLiREL's cut
HIDDEN = 32
THRESHOLD = 0.3  # the profile's default relation threshold
CALIBRATION_TEXT = "John Smith lives in New York and works at Springfield Elementary School since 2004."
CALIBRATION_SPANS = [(0, 1), (4, 5), (9, 11), (13, 13)]
CALIBRATION_RELATIONS = ["works at", "lives in", "founded", "born in"]
PAIR_SCALE = 20.0  # spread of the pair projection around its mean, so relation scores vary
PROMPT_STD = 5.0  # spread of the relation-type projection
# Variants of the architecture the config can choose, for the adapter tests.
BASE_CONFIG: dict[str, Any] = {
    "max_width": 12,
    "fine_tune": True,
    "subtoken_pooling": "first",
    "hidden_size": HIDDEN,
    "scorer": "dot",
    "rel_mode": "marker",
    "span_marker_mode": "markerv1",
    "refine_prompt": False,
    "refine_relation": False,
    "ffn_mul": 4,
    "dropout": 0.0,
    "label_embed_strategy": "both",
    "coref_classifier": False,
    "max_len": MAX_LEN,
    "max_entity_pair_distance": None,
    "fixed_relation_types": True,
    "num_train_rel_types": 10,
    "random_drop": False,
    "loss_func": "binary_cross_entropy_loss",
}


def make_glirel(folder: Path, seed: int = 0, arch: str = "deberta", **config: Any) -> Path:
    """Write the backbone (folder/backbone), glirel_config.json, pytorch_model.bin and tokenizer.json
    into `folder`; `config` overrides GLiREL settings (scorer, span_marker_mode, refine_*, ...)."""
    import torch
    from glirel import GLiREL
    from glirel.model import load_config_as_namespace

    from tests.integration.reference import minilm_dir

    backbone = _make_backbone(folder / "backbone", arch, seed)
    for name in TOKENIZER_FILES:
        shutil.copy(minilm_dir() / name, folder / name)
    settings = {**BASE_CONFIG, **config, "model_name": str(backbone)}
    (folder / "glirel_config.json").write_text(_json(settings))
    torch.manual_seed(seed)
    model = GLiREL(load_config_as_namespace(folder / "glirel_config.json"))
    model.to("cpu")
    _spread_pairs(model)
    model.save_pretrained(folder, config=settings)
    return folder


def model_yaml_glirel(sie_id: str, folder: Path) -> dict[str, Any]:
    runtime = {"threshold": THRESHOLD}
    return {
        "sie_id": sie_id,
        "weights": {"path": str(folder)},
        "tasks": {"extract": {}},
        "profiles": {"default": {"adapter": "glirel", "adapter_options": {"runtime": runtime}}},
    }


def _make_backbone(folder: Path, arch: str, seed: int) -> Path:
    import torch
    import transformers

    from tests.integration.reference import minilm_dir

    folder.mkdir(parents=True, exist_ok=True)
    for name in TOKENIZER_FILES:
        shutil.copy(minilm_dir() / name, folder / name)
    if arch == "deberta":
        relative = {"relative_attention": True, "position_buckets": 32, "pos_att_type": ["p2c", "c2p"]}
        config = transformers.DebertaV2Config(**ENCODER, **relative, **DEBERTA_EXTRA)
    else:
        config = transformers.BertConfig(**ENCODER)
    torch.manual_seed(seed)
    transformers.AutoModel.from_config(config).save_pretrained(folder)  # type: ignore[no-untyped-call]
    return folder


def _spread_pairs(model: Any) -> None:
    """Make the random model's relation scores vary by pair and by type.

    With the default init every pair vector points along one shared direction, so each relation
    type scores all pairs alike. Centring the pair projection's output (measured on one sentence)
    and widening it leaves what differs between pairs.
    """
    import torch

    captured: dict[str, torch.Tensor] = {}
    out = model.span_rep_layer.rel_rep_layer.out_project[-1]
    types = model.prompt_rep_layer[-1]
    hooks = [
        out.register_forward_hook(lambda _m, _i, result: captured.__setitem__("pairs", result)),
        types.register_forward_hook(lambda _m, inp, _o: captured.__setitem__("types", inp[0])),
    ]
    words = CALIBRATION_TEXT.replace(".", " .").split()
    ner = [[start, end, "ENT", " ".join(words[start : end + 1])] for start, end in CALIBRATION_SPANS]
    model.predict_relations(words, CALIBRATION_RELATIONS, threshold=0.0, ner=ner)
    for hook in hooks:
        hook.remove()
    pairs = captured["pairs"].reshape(-1, captured["pairs"].shape[-1])
    inputs = captured["types"].reshape(-1, captured["types"].shape[-1])
    with torch.no_grad():
        out.bias.sub_(pairs.mean(0)).mul_(PAIR_SCALE)
        out.weight.mul_(PAIR_SCALE)
        types.weight.normal_(0.0, PROMPT_STD)
        types.bias.copy_(-types.weight @ inputs.mean(0))
        if isinstance(getattr(model.scorer, "bias", None), torch.nn.Parameter):
            model.scorer.bias.zero_()  # dot_norm's -10 would put every score near 0


def _json(settings: dict[str, Any]) -> str:
    import json

    return json.dumps(settings, indent=2)
