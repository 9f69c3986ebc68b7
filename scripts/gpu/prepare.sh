#!/usr/bin/env bash
# Collect what the GPU machine lacks into .gpu-wheels/ (ignored by git), so that one `device` call
# can install it and run the kit (scripts/gpu/run.sh). Run here, where pip reaches an index:
#
#   bash scripts/gpu/prepare.sh
#
# The GPU image (Python 3.12) already has torch, transformers, numpy, msgpack, psutil, nvidia-ml-py,
# uvloop, tokenizers, pillow, numba, scipy, prometheus-client, pyyaml, peft and pytest; what sie
# needs beside them is fetched here as CPython 3.12 manylinux wheels, at the versions this checkout's
# .venv runs (so both machines run the same code), with no dependencies pulled in (each one is
# named; py-spy is diagnose.py's sampler). MiniLM's tokenizer files go along too: the kit's text models tokenize with them.
# SIE_GPU_EXTRA_WHEELS="name==version ..." adds more (a transformers matching .venv's, say).
set -euo pipefail
cd "$(dirname "$0")/../.."
KIT=.gpu-wheels
LIMIT_BYTES=$((48 << 20))  # a device call carries 64 MiB with the working tree
PY=.venv/bin/python
PACKAGES=(starlette hypercorn h2 hpack hyperframe priority wsproto posix_ipc msgspec simplejpeg soxr soundfile cffi pycparser python-multipart py-spy)

rm -rf "$KIT" && mkdir -p "$KIT/tokenizer"
specs=()
for name in "${PACKAGES[@]}"; do
  specs+=("$name==$("$PY" -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$name")")
done
read -r -a extra <<< "${SIE_GPU_EXTRA_WHEELS:-}"
for spec in "${specs[@]}" "${extra[@]}"; do
  "$PY" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform manylinux_2_5_x86_64 \
    -d "$KIT" "$spec" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
done
"$PY" - "$KIT/tokenizer" <<'PY'
import shutil, sys
from pathlib import Path
from sie.catalog import load_catalog
from sie.model_location import resolve_weights_dir
from sie.settings import DEFAULT_MODEL
folder = resolve_weights_dir(load_catalog().get(DEFAULT_MODEL))
for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt"):
    if (folder / name).is_file():
        shutil.copy(folder / name, Path(sys.argv[1]) / name)
PY
bytes=$(du -sb "$KIT" | cut -f1)
ls -1 "$KIT"
echo "$KIT: $((bytes >> 10)) KiB in $(ls "$KIT"/*.whl | wc -l) wheels and MiniLM's tokenizer"
if (( bytes > LIMIT_BYTES )); then
  echo "over $((LIMIT_BYTES >> 20)) MiB: the device call would not carry it with the tree" >&2
  exit 1
fi
