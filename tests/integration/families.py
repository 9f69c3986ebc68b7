"""One real server holding a tiny random-weight model of every family, for the end-to-end tests.

Each model is built by its family's builder in `tests.tiny_models`, described by a YAML file in a
fresh models directory, and preloaded, so the tests meet no MODEL_LOADING.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from tests.tiny_models.colbert import make_colbert, model_yaml_colbert
from tests.tiny_models.cross_encoder import make_cross_encoder, model_yaml_cross_encoder
from tests.tiny_models.gliclass import make_gliclass, model_yaml_gliclass
from tests.tiny_models.gliformer import make_gliformer, model_yaml_gliformer
from tests.tiny_models.gliner import make_gliner, model_yaml_gliner
from tests.tiny_models.gliner2 import (
    make_gliner2,
    make_gliner2_boundary,
    make_gliner2_decide,
    make_gliner2_decide_boundary,
    model_yaml_gliner2,
    model_yaml_gliner2_decide,
)
from tests.tiny_models.gliner_bi import make_gliner_bi, model_yaml_gliner_bi
from tests.tiny_models.gliner_relex import make_gliner_relex, model_yaml_gliner_relex
from tests.tiny_models.gliner_union import make_gliner_union, model_yaml_gliner_union
from tests.tiny_models.glirel import make_glirel, model_yaml_glirel
from tests.tiny_models.hybrid import make_hybrid, model_yaml_hybrid
from tests.tiny_models.laya import make_laya, model_yaml_laya
from tests.tiny_models.nli import make_nli, model_yaml_nli
from tests.tiny_models.splade import make_splade, model_yaml_splade
from tests.tiny_models.token_classification import (
    make_token_classification,
    model_yaml_token_classification,
)

RERANKER = "tiny/reranker"
SPLADE = "tiny/splade"
COLBERT = "tiny/colbert"
HYBRID = "tiny/hybrid"
NER = "tiny/ner"
GLINER = "tiny/gliner"
GLICLASS = "tiny/gliclass"
GLINER2 = "tiny/gliner2"
GLINER2_BOUNDARY = "tiny/gliner2.5"
GLINER2_DECIDE = "tiny/gliner2-decide"
GLINER2_DECIDE_BOUNDARY = "tiny/gliner2.5-decide"
GLINER_BI = "tiny/gliner-bi"
GLINER_RELEX = "tiny/gliner-relex"
GLINER_UNION = "tiny/gliner-union"
GLIREL = "tiny/glirel"
GLIFORMER = "tiny/gliformer"
LAYA = "tiny/laya"
NLI = "tiny/nli"
DENSE = "sentence-transformers/all-MiniLM-L6-v2"

Builder = tuple[Callable[[Path], Path], Callable[[str, Path], dict[str, Any]]]
BUILDERS: dict[str, Builder] = {
    RERANKER: (make_cross_encoder, model_yaml_cross_encoder),
    SPLADE: (make_splade, model_yaml_splade),
    COLBERT: (make_colbert, model_yaml_colbert),
    HYBRID: (make_hybrid, model_yaml_hybrid),
    NER: (make_token_classification, model_yaml_token_classification),
    GLINER: (make_gliner, model_yaml_gliner),
    GLICLASS: (make_gliclass, model_yaml_gliclass),
    GLINER2: (make_gliner2, model_yaml_gliner2),
    GLINER2_BOUNDARY: (make_gliner2_boundary, model_yaml_gliner2),
    GLINER2_DECIDE: (make_gliner2_decide, model_yaml_gliner2_decide),
    GLINER2_DECIDE_BOUNDARY: (make_gliner2_decide_boundary, model_yaml_gliner2_decide),
    GLINER_BI: (make_gliner_bi, model_yaml_gliner_bi),
    GLINER_RELEX: (make_gliner_relex, model_yaml_gliner_relex),
    GLINER_UNION: (make_gliner_union, model_yaml_gliner_union),
    GLIREL: (make_glirel, model_yaml_glirel),
    GLIFORMER: (make_gliformer, model_yaml_gliformer),
    LAYA: (make_laya, model_yaml_laya),
    NLI: (make_nli, model_yaml_nli),
}


def build_models_dir(root: Path) -> tuple[Path, dict[str, Path]]:
    """Weights folders under root/weights, YAML files under root/models (plus the built-in MiniLM)."""
    from sie.catalog import BUILTIN_MODELS_DIR

    models_dir = root / "models"
    models_dir.mkdir(parents=True)
    folders: dict[str, Path] = {}
    for sie_id, (make, describe) in BUILDERS.items():
        folder = make(root / "weights" / sie_id.replace("/", "__"))
        folders[sie_id] = folder
        (models_dir / f"{sie_id.replace('/', '__')}.yaml").write_text(
            yaml.safe_dump(describe(sie_id, folder))
        )
    builtin = BUILTIN_MODELS_DIR / "sentence-transformers__all-MiniLM-L6-v2.yaml"
    (models_dir / builtin.name).write_text(builtin.read_text())
    return models_dir, folders
