"""A tiny random-weight GLiClass (uni-encoder) built offline, in the head layouts of published models.

The `gliclass` package builds the model from its config (encoder config inline, nothing fetched)
and saves it as published GLiClass models are saved: config.json, model.safetensors, and the
tokenizer with GLiClass's marker tokens added. DeBERTa layouts get a small SentencePiece-style
(Unigram, Metaspace) tokenizer as DeBERTa-v3 has; the others MiniLM's WordPiece one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

MAX_SEQUENCE_LENGTH = 64  # small, so tests reach the window's cut
MARKERS = ["<<LABEL>>", "<<SEP>>", "<<EXAMPLE>>"]
ENCODER: dict[str, Any] = {
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 64,
    "max_position_embeddings": 512,
}
# Head layouts (GLiClassModelConfig fields), with the encoder each is built on.
LAYOUTS: dict[str, dict[str, Any]] = {
    # labels first, the first token pooled, an MLP scorer (the v3.0 and edge models)
    "deberta": {
        "encoder": "deberta",
        "prompt_first": True,
        "scorer_type": "mlp",
        "pooling_strategy": "first",
    },
    # text first, a BiLSTM over the tokens, a dot-product scorer
    "text-first": {
        "encoder": "deberta",
        "prompt_first": False,
        "scorer_type": "simple",
        "pooling_strategy": "first",
        "use_lstm": True,
    },
    # the instruct models: segment embeddings, each label's tokens averaged
    "instruct": {
        "encoder": "deberta",
        "prompt_first": True,
        "scorer_type": "mlp",
        "pooling_strategy": "first",
        "class_token_pooling": "average",
        "use_segment_embeddings": True,
    },
    # the multilingual edge models: ModernBERT, the text's tokens through a cross-attention scorer
    "modernbert": {
        "encoder": "modernbert",
        "prompt_first": True,
        "scorer_type": "cross-attn",
        "pooling_strategy": "pass",
        "class_token_pooling": "average",
        "extract_text_features": True,
    },
    # no published model: a pooling over padding and a scorer coupling label slots
    "padding-bound": {
        "encoder": "bert",
        "prompt_first": False,
        "scorer_type": "hopfield",
        "pooling_strategy": "avg",
    },
}
# Calibration (see `_spread_scores`): the texts and labels whose logits are spread to this std.
CALIBRATION_TEXTS = ["the app crashes on startup", "charged twice for one order", "the team won last night"]
CALIBRATION_LABELS = ["billing", "bug report", "feature request", "sports"]
LOGIT_STD = 2.0
# Words of the Unigram tokenizer's vocabulary (each also splits into characters).
WORDS = (
    "the app crashes on startup when config file is missing billing bug report feature request charged",
    "twice for one order sports finance politics team won championship last night stocks fell sharply",
    "after a classify ticket this text about travel food music weather",
)


def make_gliclass(folder: Path, layout: str = "deberta", seed: int = 0) -> Path:
    """Write config.json, model.safetensors and the tokenizer into `folder`; return it."""
    import torch
    from gliclass import GLiClassModel, GLiClassModelConfig

    spec = dict(LAYOUTS[layout])
    encoder = spec.pop("encoder")
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = _tokenizer(encoder)
    tokenizer.save_pretrained(folder)
    ids = {marker: tokenizer.convert_tokens_to_ids(marker) for marker in MARKERS}
    config = GLiClassModelConfig(
        encoder_config=_encoder_config(encoder, len(tokenizer), tokenizer.pad_token_id),
        encoder_model="tiny-encoder-not-on-disk",  # never read: the encoder is built from its config
        class_token_index=ids["<<LABEL>>"],
        text_token_index=ids["<<SEP>>"],
        example_token_index=ids["<<EXAMPLE>>"],
        vocab_size=len(tokenizer),
        scorer_mlp_hidden_size=32,
        scorer_num_heads=4,
        dropout=0.0,
        **spec,
    )
    torch.manual_seed(seed)
    model = GLiClassModel(config).eval()
    _spread_scores(model, tokenizer)
    model.save_pretrained(folder)
    return folder


def model_yaml_gliclass(sie_id: str, folder: Path) -> dict[str, Any]:
    """A default (single-label) profile and SIE's multi-label one."""
    return {
        "sie_id": sie_id,
        "weights": {"path": str(folder)},
        "tasks": {"extract": {}},
        "max_sequence_length": MAX_SEQUENCE_LENGTH,
        "profiles": {
            "default": {"adapter": "gliclass"},
            "multi-label": {
                "adapter": "gliclass",
                "adapter_options": {"runtime": {"multi_label": True}},
            },
        },
    }


def pipeline(folder: Path, classification_type: str = "single-label") -> Any:
    """The reference: gliclass's own pipeline on the saved folder, at the YAML's window."""
    from gliclass import GLiClassModel, ZeroShotClassificationPipeline
    from transformers import AutoTokenizer

    model = GLiClassModel.from_pretrained(str(folder), local_files_only=True).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    return ZeroShotClassificationPipeline(
        model,
        tokenizer,
        max_length=MAX_SEQUENCE_LENGTH,
        classification_type=classification_type,
        device="cpu",
        progress_bar=False,
    )


def _tokenizer(encoder: str) -> Any:
    if encoder == "deberta":
        from transformers import DebertaV2Tokenizer

        tokenizer = DebertaV2Tokenizer(vocab=_unigram_vocab())
    else:
        from transformers import AutoTokenizer

        from tests.integration.reference import minilm_dir

        tokenizer = AutoTokenizer.from_pretrained(str(minilm_dir()))
    tokenizer.add_tokens(MARKERS, special_tokens=True)
    return tokenizer


def _unigram_vocab() -> list[tuple[str, float]]:
    """Whole words (with the Metaspace prefix) score above their characters, so words stay whole."""
    specials = [("[PAD]", 0.0), ("[UNK]", 0.0), ("[CLS]", 0.0), ("[SEP]", 0.0), ("[MASK]", 0.0)]
    unique = dict.fromkeys(word for line in WORDS for word in line.split())
    words = [(f"\u2581{w}", -3.0 - 0.01 * i) for i, w in enumerate(unique)]
    chars = sorted(set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,!?'-:;()"))
    pieces = [("\u2581", -4.0)] + [(c, -6.0) for c in chars] + [(f"\u2581{c}", -6.5) for c in chars]
    return specials + words + pieces


def _encoder_config(encoder: str, vocab_size: int, pad_token_id: int) -> dict[str, Any]:
    common = {**ENCODER, "vocab_size": vocab_size, "pad_token_id": pad_token_id}
    if encoder == "deberta":
        # Relative positions only, as DeBERTa-v3; a wider init lets each <<LABEL>> take in its label.
        relative = {"relative_attention": True, "position_buckets": 32, "pos_att_type": ["p2c", "c2p"]}
        extra = {"position_biased_input": False, "initializer_range": 0.3}
        return {"model_type": "deberta-v2", **common, **relative, **extra}
    if encoder == "modernbert":
        # One global and one local (sliding-window) layer, as ModernBERT alternates them.
        local = {"global_attn_every_n_layers": 2, "local_attention": 8, "reference_compile": False}
        specials = {"bos_token_id": 101, "eos_token_id": 102, "cls_token_id": 101, "sep_token_id": 102}
        return {"model_type": "modernbert", **common, **local, **specials}
    return {"model_type": "bert", **common}


def _spread_scores(model: Any, tokenizer: Any) -> None:
    """Make the random model's label logits differ by label and text, at a useful scale.

    At init every label vector is about the same (the <<LABEL>> tokens share one embedding) and the
    logits sit far from 0, so every softmax is uniform and every sigmoid 0. Standardizing the label
    projector's inputs (measured on a calibration batch) spreads the labels apart; scaling the last
    layer of the scorer (or, for the dot scorer, the text projector) sets the logits' spread.
    """
    import torch

    inner = model.model
    captured: dict[str, torch.Tensor] = {}
    inner.classes_projector.register_forward_hook(lambda _m, inp, _o: captured.__setitem__("labels", inp[0]))
    prompt = "".join(f"<<LABEL>>{label}" for label in CALIBRATION_LABELS) + "<<SEP>>"
    batch = tokenizer(
        [prompt + t if model.config.prompt_first else t + prompt for t in CALIBRATION_TEXTS],
        padding="longest",
        return_tensors="pt",
    )
    inputs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
    n = len(CALIBRATION_LABELS)
    with torch.no_grad():
        model(**inputs, max_num_classes=n)
        rows = captured["labels"].reshape(-1, captured["labels"].shape[-1])
        mean, std = rows.mean(0), rows.std(0) + 1e-6
        first = inner.classes_projector.linear_1
        first.weight.div_(std)
        first.bias.sub_(first.weight @ mean)
        logits = model(**inputs, max_num_classes=n).logits
        last, is_logit_layer = _last_layer(inner)
        scale = LOGIT_STD / float(logits.std())
        last.weight.mul_(scale)
        last.bias.mul_(scale)
        if is_logit_layer:  # centre the logits too, so sigmoids spread around 0.5
            last.bias.sub_(float(logits.mean()) * scale)
    inner.classes_projector._forward_hooks.clear()


def _last_layer(inner: Any) -> tuple[Any, bool]:
    """The layer that scales the logits, and whether it outputs them."""
    scorer = inner.scorer
    for name in ("mlp", "score_mlp", "out_mlp"):
        if hasattr(scorer, name):
            return getattr(scorer, name)[-1], True
    return inner.text_projector.linear_2, False  # the dot scorer: logits scale with the text vectors
