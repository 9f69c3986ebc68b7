"""Serve the same weights under SIE's model ids from sie and from sie-server, and compare the outputs.

Tiny random weights of each model's real architecture and output size are written into a Hugging
Face cache at the revisions SIE's catalog pins, with MiniLM's WordPiece tokenizer (a small BPE one
for the decoder); both servers read that cache. Then the same requests go to both through the real
sie-sdk and the largest difference per model is printed.

    # 1. the weights (in sie's environment: torch, transformers)
    .venv/bin/python scripts/compare_with_sie.py fabricate --cache /opt/sie-peer-cache/hub
    # 2. sie-server 0.10.1 on that cache (its own environment), and sie on the same cache
    SIE_PEER_EXTRA_MODELS=$(.venv/bin/python scripts/compare_with_sie.py ids) sie-peer.sh 18080
    .venv/bin/python -m sie serve --port 8080 --local-cache /opt/sie-peer-cache/hub \\
        --models "$(.venv/bin/python scripts/compare_with_sie.py ids)"
    # 3. the comparison (sie-sdk needs Python >= 3.12: .venv-sdk)
    .venv-sdk/bin/python scripts/compare_with_sie.py compare --sie http://127.0.0.1:18080 \\
        --ours http://127.0.0.1:8080
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# SIE id -> what to build. Each uses an SIE adapter that runs on CPU without SIE's Rust extension.
MODELS: dict[str, dict[str, Any]] = {
    "intfloat/e5-small-v2": {"kind": "bert", "hidden": 384},
    "Snowflake/snowflake-arctic-embed-s": {"kind": "bert", "hidden": 384},
    "Alibaba-NLP/gte-modernbert-base": {"kind": "modernbert", "hidden": 768},
    "Qwen/Qwen3-Embedding-0.6B": {"kind": "qwen3", "hidden": 1024},
    "cross-encoder/ms-marco-MiniLM-L-6-v2": {"kind": "cross_encoder", "hidden": 384},
    "naver/splade-v3": {"kind": "splade", "hidden": 128},
    # SIE's file pins bfloat16 and the head's 1024 -> 512 sizes, so the encoder is 1024 wide here.
    "sugiv/stablebridge-pruner-highlighter": {"kind": "context_pruner", "hidden": 1024, "tolerance": 5e-3},
}
PRUNED = [  # passages for the pruner: punctuation, a double space, a spelled-out separator
    "Cats sleep between 12 and 16 hours a day, often in short naps.",
    "The stock market closed  higher on Friday; bonds fell.",
    "Deep [SEP] sleep",
    "A cat's sleep is light: its ears keep turning towards sounds, even in deep sleep. " * 3,
]
DOCUMENTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Retrieval pipelines embed documents once and queries at search time.",
    "A man is eating food.",
    "Protein folding is driven by hydrophobic interactions. " * 6,
]
QUERY = "what do retrieval pipelines embed?"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True)
    fabricate = commands.add_parser("fabricate", help="write the tiny models into a Hugging Face cache")
    fabricate.add_argument("--cache", type=Path, required=True, help="the hub folder (models--*/...)")
    commands.add_parser("ids", help="print the model ids, comma-separated")
    compare = commands.add_parser("compare", help="send the same requests to both servers")
    compare.add_argument("--sie", required=True, help="sie-server's URL")
    compare.add_argument("--ours", required=True, help="sie's URL")
    args = parser.parse_args()
    if args.command == "ids":
        print(",".join(MODELS))
        return 0
    if args.command == "fabricate":
        for model_id, spec in MODELS.items():
            print(f"{model_id}: {_fabricate(args.cache, model_id, spec)}", file=sys.stderr)
        return 0
    rows = [_compare(model_id, spec["kind"], args.sie, args.ours) for model_id, spec in MODELS.items()]
    print("| model | output | max abs diff | cosine (min) |\n|---|---|---|---|")
    for row in rows:
        print(f"| {row.model} | {row.output} | {row.max_diff:.2e} | {row.min_cosine:.6f} |")
    return 0 if all(r.max_diff < MODELS[r.model].get("tolerance", 1e-3) for r in rows) else 1


# -- weights -----------------------------------------------------------------------------------------------
def _fabricate(hub: Path, model_id: str, spec: dict[str, Any]) -> Path:
    import torch
    import transformers

    from sie.catalog import load_catalog
    from sie.model_location import resolve_weights_dir

    entry = load_catalog().get(model_id)
    revision = entry.hf_revision  # SIE's pinned revision, as the catalog has it
    repo = hub / ("models--" + (entry.hf_id or model_id).replace("/", "--"))
    snapshot = repo / "snapshots" / str(revision)
    snapshot.mkdir(parents=True, exist_ok=True)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(str(revision))
    torch.manual_seed(0)
    hidden, kind = spec["hidden"], spec["kind"]
    minilm = resolve_weights_dir(load_catalog().get("sentence-transformers/all-MiniLM-L6-v2"))
    small = {"num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 2 * hidden}
    if kind == "qwen3":
        _bpe_tokenizer(snapshot)
        config = transformers.Qwen3Config(
            vocab_size=512,
            hidden_size=hidden,
            num_key_value_heads=2,
            head_dim=64,
            **small,
            max_position_embeddings=512,
            eos_token_id=0,
            pad_token_id=0,
            tie_word_embeddings=True,
        )
        model: Any = transformers.Qwen3Model(config)
    else:
        for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt"):
            (snapshot / name).write_bytes((minilm / name).read_bytes())
        if kind == "modernbert":
            config = transformers.ModernBertConfig(
                vocab_size=30522,
                hidden_size=hidden,
                **small,
                pad_token_id=0,
                cls_token_id=101,
                sep_token_id=102,
                bos_token_id=101,
                eos_token_id=102,
            )
            model = transformers.ModernBertModel(config)
        else:
            bert = transformers.BertConfig(vocab_size=30522, hidden_size=hidden, **small)
            if kind == "context_pruner":
                _roberta_pairs(snapshot)
                _keep_head(hub, model_id, hidden)
                xlmr = transformers.XLMRobertaConfig(
                    vocab_size=30522, hidden_size=hidden, **small, type_vocab_size=1, pad_token_id=0
                )
                xlmr.num_labels = 1
                model = transformers.XLMRobertaForSequenceClassification(xlmr)
            elif kind == "cross_encoder":
                bert.num_labels = 1
                model = transformers.BertForSequenceClassification(bert)
            elif kind == "splade":
                model = transformers.BertForMaskedLM(bert)
            else:
                model = transformers.BertModel(bert)
    model.save_pretrained(snapshot)
    return snapshot


def _roberta_pairs(folder: Path) -> None:
    """MiniLM's tokenizer with XLM-R's pair layout (`[CLS] A [SEP] [SEP] B [SEP]`, one token type),
    which SIE's pruner reads its passage from."""
    path = folder / "tokenizer.json"
    data = json.loads(path.read_text())
    special = {
        name: {"id": name, "ids": [ids], "tokens": [name]} for name, ids in (("[CLS]", 101), ("[SEP]", 102))
    }
    cls, sep = ({"SpecialToken": {"id": name, "type_id": 0}} for name in ("[CLS]", "[SEP]"))
    a, b = ({"Sequence": {"id": name, "type_id": 0}} for name in ("A", "B"))
    data["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [cls, a, sep],
        "pair": [cls, a, sep, sep, b, sep],
        "special_tokens": special,
    }
    data["padding"] = data["truncation"] = None
    path.write_text(json.dumps(data))
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config.update(
        tokenizer_class="PreTrainedTokenizerFast", model_input_names=["input_ids", "attention_mask"]
    )
    (folder / "tokenizer_config.json").write_text(json.dumps(config))


def _keep_head(hub: Path, model_id: str, hidden: int) -> None:
    """A random pruning head (Linear, GELU, dropout, Linear) as `best.pt` of the pruner's own repository,
    at its main branch."""
    import torch

    head = torch.nn.Sequential(
        torch.nn.Linear(hidden, 512), torch.nn.GELU(), torch.nn.Dropout(0.2), torch.nn.Linear(512, 1)
    )
    for parameter in head.parameters():
        torch.nn.init.normal_(parameter, std=0.08)  # keep probabilities spread over the thresholds
    repo = hub / ("models--" + model_id.replace("/", "--"))
    snapshot = repo / "snapshots" / ("1" * 40)
    snapshot.mkdir(parents=True, exist_ok=True)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text("1" * 40)
    weights = {f"classifier.{key}": value for key, value in head.state_dict().items()}
    torch.save({"pruning_head": weights}, snapshot / "best.pt")


def _bpe_tokenizer(folder: Path) -> None:
    """A small byte-level BPE that ends every text with <|endoftext|>, as Qwen3-Embedding's does."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=512, special_tokens=["<|endoftext|>"], show_progress=False)
    tokenizer.train_from_iterator([*DOCUMENTS, QUERY, "Instruct: Query: passages answer"] * 4, trainer)
    tokenizer.post_processor = processors.TemplateProcessing(
        single="$A <|endoftext|>", special_tokens=[("<|endoftext|>", 0)]
    )
    tokenizer.save(str(folder / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "eos_token": "<|endoftext|>",
        "pad_token": "<|endoftext|>",
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config))


# -- comparison --------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Row:
    model: str
    output: str
    max_diff: float
    min_cosine: float


def _compare(model_id: str, kind: str, sie_url: str, our_url: str) -> Row:
    import numpy as np
    from sie_sdk import SIEClient

    sie, ours = SIEClient(sie_url), SIEClient(our_url)
    items = [{"text": t} for t in DOCUMENTS]
    if kind == "context_pruner":
        return _compare_pruning(model_id, sie, ours)
    if kind == "cross_encoder":
        a, b = (np.array(_scores(c.score(model_id, {"text": QUERY}, items))) for c in (sie, ours))
        return Row(model_id, "score", float(np.abs(a - b).max()), 1.0)
    output = "sparse" if kind == "splade" else "dense"
    pairs = []
    for is_query in (False, True):
        got = [c.encode(model_id, items, output_types=[output], is_query=is_query) for c in (sie, ours)]
        pairs.extend(zip(*(_vectors(results, output) for results in got), strict=True))
    diffs = [float(np.abs(x - y).max()) for x, y in pairs]
    cosines = [float(x @ y / (np.linalg.norm(x) * np.linalg.norm(y))) for x, y in pairs]
    return Row(model_id, output + " (documents, queries)", max(diffs), min(cosines))


def _compare_pruning(model_id: str, sie: Any, ours: Any) -> Row:
    """Each profile's spans, character by character, and the scores of the items whose spans are the
    same (the summary's relevance included). In bfloat16, as SIE's file says, a token whose keep
    probability sits at a threshold can take either label; such characters are counted, not
    hidden."""
    items = [{"text": t} for t in PRUNED]
    diffs, differing, labelled = [0.0], 0, 0
    for profile in ("default", "aggressive", "conservative"):
        got = [
            c.extract(model_id, items, instruction=QUERY, options={"profile": profile}) for c in (sie, ours)
        ]
        for text, theirs, mine in zip(PRUNED, *got, strict=True):
            a, b = (_entities(result) for result in (theirs, mine))
            if [e[:4] for e in a[1:]] == [e[:4] for e in b[1:]]:
                diffs.extend(abs(x[4] - y[4]) for x, y in zip(a, b, strict=True))
            labels_a, labels_b = _character_labels(a, len(text)), _character_labels(b, len(text))
            differing += sum(x != y for x, y in zip(labels_a, labels_b, strict=True))
            labelled += sum(x is not None for x in labels_a)
    print(f"{model_id}: {differing} of {labelled} characters labelled differently", file=sys.stderr)
    return Row(
        model_id, "extract spans (3 profiles)", max(diffs) if differing <= labelled // 100 else 1.0, 1.0
    )


def _character_labels(entities: list[tuple[Any, ...]], length: int) -> list[str | None]:
    labels: list[str | None] = [None] * length
    for label, start, end, *_ in entities[1:]:
        labels[start:end] = [label] * (end - start)
    return labels


def _entities(result: Any) -> list[tuple[Any, ...]]:
    entities = result["entities"] if isinstance(result, dict) else result.entities
    return [(e["label"], e.get("start"), e.get("end"), e["text"], float(e["score"])) for e in entities]


def _scores(result: Any) -> list[float]:
    ranked = result["scores"] if isinstance(result, dict) else result.scores
    by_index = {
        int(str(s["item_id"]).rsplit("-", 1)[-1]) if s.get("item_id") else i: s["score"]
        for i, s in enumerate(ranked)
    }
    return [by_index[i] for i in sorted(by_index)]


def _vectors(results: Any, output: str) -> list[Any]:
    import numpy as np

    vectors = []
    for result in results:
        value = result[output]
        if output == "sparse":
            dense = np.zeros(30522, np.float32)
            dense[np.asarray(value["indices"])] = np.asarray(value["values"], np.float32)
            vectors.append(dense)
        else:
            vectors.append(np.asarray(value, np.float32))
    return vectors


if __name__ == "__main__":
    sys.exit(main())
