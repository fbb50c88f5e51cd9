"""Shared fixtures: a tiny random model for fast signal tests, the embedded model and the demo
corpus for integration tests, and a temporary cache so tests never touch the user's files."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from explorer.paths import shared_data_dir

# Tests share one converted model across runs (it takes ~40 s to build), but never the user's
# run database: that is per-test below.
os.environ.setdefault("EXPLORER_CACHE", str(Path(__file__).resolve().parent.parent / ".cache"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Files `explorer data fetch` puts away go to a folder of this test session, never the user's.
if "EXPLORER_DOWNLOADS" not in os.environ:
    os.environ["EXPLORER_DOWNLOADS"] = tempfile.mkdtemp(prefix="explorer-fetched-")
    atexit.register(shutil.rmtree, os.environ["EXPLORER_DOWNLOADS"], True)


@pytest.fixture(scope="session")
def embedded_lm():
    """The embedded SmolLM2-135M-Instruct with eager attention (signals need attention weights)."""
    from explorer.engine.loader import load_model

    return load_model("embedded", attn_implementation="eager")


@pytest.fixture(scope="session")
def tiny_lm():
    """A 2-layer randomly initialised Llama-style model with the embedded model's tokenizer."""
    from explorer.engine.loader import tiny_random_model

    return tiny_random_model(seed=0)


@pytest.fixture(scope="session")
def demo_retriever():
    from explorer.retrieval.registry import open_retriever

    return open_retriever("demo")


@pytest.fixture(scope="session")
def language():
    from explorer.engine.language import get_language

    return get_language()


@pytest.fixture()
def shared_data() -> Path:
    path = shared_data_dir()
    if not path.is_dir():
        pytest.skip(f"benchmark data not found at {path} "
                    "(set EXPLORER_DATA or place ../shared/data beside the project)")
    return path


@pytest.fixture(scope="session")
def benchmark_retriever():
    """BM25 over the pooled benchmark corpus (built into the test cache the first time), or a skip without the data."""
    path = shared_data_dir()
    if not path.is_dir():
        pytest.skip(f"benchmark data not found at {path}: the benchmark corpus is built from it")
    from explorer.retrieval.registry import open_retriever

    return open_retriever("benchmark")


@pytest.fixture()
def tmp_db(tmp_path: Path) -> Path:
    return tmp_path / "runs.sqlite"


@pytest.fixture(scope="session")
def ui_app(tmp_path_factory):
    """The web app as ``make run`` starts it (embedded model, demo corpus), shared by the browser test modules:
    one start and one model load. Each test finds its own runs by id, so they can share the database; on
    the demo corpus the recorded case studies can be forked, as a user forks them."""
    from tests.browser_support import start_app

    server = start_app(tmp_path_factory.mktemp("ui-app"), name="ui")
    yield server
    server.stop()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Files with browser and slow tests first, each file's tests in their own order.

    ``make test`` hands whole files to two workers (``--dist loadfile --no-loadscope-reorder``) in this
    order: the long files start first, and the many short ones fill in behind them, so neither worker
    is left running one long file alone at the end."""
    def file_of(item: pytest.Item) -> str:
        return item.nodeid.split("::")[0]

    weight: dict[str, int] = {}
    for item in items:
        heavy = item.get_closest_marker("browser") is not None or item.get_closest_marker("slow") is not None
        weight[file_of(item)] = weight.get(file_of(item), 0) + heavy
    items.sort(key=lambda item: -weight[file_of(item)])
