"""SIE's adapter classes, each mapped to one of our families or refused with the reason."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class AdapterRule:
    """What an SIE adapter class is here: a family, or the reason there is none yet."""

    family: str | None
    refusal: str = ""
    # SIE's adapter runs the model folder's own code unless the YAML says `trust_remote_code: false`.
    runs_model_code: bool = False
    # Runtime options the adapter class itself implies (its prompt recipe), before the YAML's own.
    runtime: Mapping[str, Any] = field(default_factory=dict)
    # Load-time options the adapter class itself implies, before the YAML's own.
    loadtime: Mapping[str, Any] = field(default_factory=dict)
    # SIE's GTE sparse adapter applies log1p twice when the model id says "v3".
    log1p_relu_for_v3_ids: bool = False
    # An adapter that runs several architectures (SIE's SGLang ones): the ids served here, by family.
    by_id: Mapping[str, str] = field(default_factory=dict)

    def family_for(self, sie_id: str) -> str | None:
        return self.by_id.get(sie_id, self.family)


def _family(name: str, *, runs_model_code: bool = False) -> AdapterRule:
    return AdapterRule(name, runs_model_code=runs_model_code)


def refused(reason: str) -> AdapterRule:
    return AdapterRule(None, reason)


NO_GENERATION = "text generation is not served by this server"
NO_VIDEO = "video inputs are not served by this server (no video decoding or frame sampling here)"

# SIE adapter class name -> our family (or why not). Unknown classes are refused by name. An adapter
# that runs custom architectures natively in SIE (RoPE, Nomic, Jina, Candle's kernels) runs the
# model folder's own code here, as SIE's own transformers-based adapters do by default.
ADAPTERS: dict[str, AdapterRule] = {
    "SentenceTransformerDenseAdapter": _family("dense", runs_model_code=True),
    "CandleEmbeddingAdapter": _family("dense", runs_model_code=True),
    "BertFlashAdapter": _family("dense"),
    "XLMRobertaFlashAdapter": _family("dense", runs_model_code=True),
    "ModernBERTFlashAdapter": _family("dense", runs_model_code=True),
    "PyTorchEmbeddingAdapter": _family("dense", runs_model_code=True),
    "Qwen2FlashAdapter": _family("dense", runs_model_code=True),
    "SGLangEmbeddingAdapter": _family("dense"),
    "RoPEFlashAdapter": _family("dense", runs_model_code=True),
    "NomicFlashAdapter": _family("dense", runs_model_code=True),
    "BGEM3FlashAdapter": _family("hybrid"),
    "BGEM3FlagAdapter": _family("hybrid"),
    "SPLADEFlashAdapter": _family("splade"),
    "ColBERTAdapter": _family("colbert"),
    "ColBERTModernBERTFlashAdapter": _family("colbert"),
    "ColBERTRotaryFlashAdapter": _family("colbert", runs_model_code=True),
    "BertFlashCrossEncoderAdapter": _family("cross_encoder"),
    "ModernBertFlashCrossEncoderAdapter": _family("cross_encoder", runs_model_code=True),
    "JinaFlashCrossEncoderAdapter": _family("cross_encoder", runs_model_code=True),
    "CrossEncoderAdapter": _family("cross_encoder"),
    "NLIClassificationFlashAdapter": _family("nli_zero_shot"),
    "NLIClassificationAdapter": _family("nli_zero_shot"),
    "GLiNERAdapter": _family("gliner"),
    "GLiClassAdapter": _family("gliclass"),
    "GLiNERBiAdapter": _family("gliner_bi"),
    "CLIPAdapter": _family("clip"),
    "SiglipAdapter": _family("clip"),
    "Owlv2Adapter": _family("owlv2"),
    "WhisperAdapter": _family("whisper"),
    # GTE masked LMs (model_type "new") run on transformers' GTE classes (sie.gpu_proc.adapters.
    # gte_new). SIE's adapter zeroes the special tokens' weights, and doubles the log1p for "v3" ids.
    "GTESparseFlashAdapter": AdapterRule(
        "splade", loadtime={"zero_special_tokens": True}, log1p_relu_for_v3_ids=True
    ),
    "PrivacyFilterAdapter": _family("privacy_filter"),
    # Families this server does not have.
    "GLiNERUnionAdapter": _family("gliner_union"),
    "GLiNER2Adapter": _family("gliner2"),
    "GLiNER2ClassificationAdapter": _family("gliner2"),
    # Entities of span or GLiNER2.5 boundary checkpoints; config.json says which network loads.
    "GLiNER2EntitiesAdapter": _family("gliner2"),
    "GLiNER2DecideAdapter": _family("gliner2_decide"),
    "GLiRELAdapter": _family("glirel"),
    "GLiFormerAdapter": _family("gliformer"),
    "Qwen2FlashCrossEncoderAdapter": _family("llm_reranker"),
    "NativeCausalCrossEncoderAdapter": AdapterRule("llm_reranker", runtime={"input_format": "native"}),
    "Qwen3VLRerankerAdapter": _family("qwen3_vl_reranker"),
    "ColPaliAdapter": _family("colpali"),
    "ColQwen2Adapter": _family("colqwen2"),
    "ColQwen3Adapter": _family("colqwen3"),
    "ColSmolAdapter": _family("colsmol"),
    "NemoColEmbedAdapter": refused("NVIDIA's vision-language ColEmbed is not served here"),
    "Qwen3VLEmbeddingAdapter": _family("qwen3_vl_embedding"),
    "TopkEmbedAdapter": refused("Gated DeltaNet multimodal embedders are not served here"),
    "SparseEncoderVisionAdapter": refused("vision sparse encoders are not served here"),
    "GroundingDINOAdapter": _family("grounding_dino"),
    "Sam3Adapter": refused("segmentation (SAM 3) is not served here"),
    "ParakeetTDTAdapter": _family("parakeet"),
    # SIE's pruner activates its relevance logit with a sigmoid, whatever config.json says.
    "StablebridgePrunerAdapter": AdapterRule("context_pruner", runtime={"activation": "sigmoid"}),
    "FakeAdapter": _family("fake"),
    "DoclingAdapter": refused("document conversion (Docling) is not served here"),
    "DonutAdapter": _family("donut"),
    "Florence2Adapter": _family("florence2"),
    "LayaAdapter": _family("laya"),
    "MinerUVLAdapter": _family("mineru_vl"),
    "CTranslate2GenerationAdapter": refused(NO_GENERATION),
    "SGLangGenerationAdapter": refused(NO_GENERATION),
    "SGLangGemmaAdapter": refused(NO_GENERATION),
    "SGLangCuda13Adapter": refused(NO_GENERATION),
    # SIE runs LightOnOCR-2 and -3, GLM-OCR and PaddleOCR-VL on SGLang by default and on transformers in
    # their `transformers` profiles, to the same contract; here both profiles run on transformers.
    "SGLangVisionExtractAdapter": AdapterRule(
        None,
        "OCR by this vision-language model is not served here "
        "(of SIE's SGLang OCR models, LightOnOCR-2 and -3, GLM-OCR and PaddleOCR-VL are)",
        by_id={
            "lightonai/LightOnOCR-2-1B": "lighton_ocr",
            "lightonai/LightOnOCR-3-4B": "lighton_ocr3",
            "zai-org/GLM-OCR": "glm_ocr",
            "PaddlePaddle/PaddleOCR-VL-1.5": "paddleocr_vl",
        },
    ),
    "LightOnOCRAdapter": _family("lighton_ocr"),
    "GlmOcrAdapter": _family("glm_ocr"),
    "PaddleOCRVLAdapter": _family("paddleocr_vl"),
    "LightOnOCR3Adapter": _family("lighton_ocr3"),
}

NV_EMBED = (
    "NV-Embed pools inside its own code (modeling_nvembed.py: latent attention over the last hidden "
    "states, the instruction masked out of the mean), which no package here ships to test a port "
    "against; not served rather than served unverified"
)
# Checkpoints whose YAML reads as servable but whose computation this server does not have yet:
# refused rather than served wrong.
CUSTOM_CODE_REPOS: dict[str, str] = {
    "nvidia/NV-Embed-v2": NV_EMBED,
    "Hyukkyu/nv-embed-v2": NV_EMBED,  # SIE's pin: a mirror with transformers-5 patches to that code
}
