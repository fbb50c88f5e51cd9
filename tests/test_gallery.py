"""The recorded runs shipped in assets/gallery: current trace version, the case studies they claim,
small enough to ship, and rendered by the same view as any run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from explorer.engine.embedded import embedded_display_name
from explorer.eval.datasets import load_dataset
from explorer.trace import TRACE_VERSION, Trace
from explorer.ui.runs import gallery
from explorer.ui.views.render import render_runs

MAX_BYTES = 2 * 2**20


@pytest.fixture(scope="module")
def shelf() -> gallery.Gallery:
    return gallery.load()


def test_every_shipped_trace_validates_against_the_current_trace_version(shelf) -> None:
    index = gallery.read_index()
    assert index["trace_version"] == TRACE_VERSION, (
        "run `python -m explorer.ui.runs.gallery` to record the gallery again"
    )
    assert shelf.problem == "" and gallery.is_stale() == ""
    for row in index["items"]:
        raw = json.loads((gallery.GALLERY_DIR / row["file"]).read_text(encoding="utf-8"))
        assert raw["version"] == TRACE_VERSION, row["file"]
        trace = Trace.from_dict(raw)
        trace.validate()
        assert trace.status == "complete" and trace.run_id == row["run_id"] and trace.method == row["method"]
    listed = {row["file"] for row in index["items"]} | {gallery.INDEX}
    assert {p.name for p in gallery.GALLERY_DIR.iterdir()} == listed, "files in assets/gallery that the index omits"


def test_the_gallery_holds_the_four_papers_case_studies_with_their_methods(shelf) -> None:
    cases = {q.extra["case_study"]: q for q in load_dataset("demo") if q.extra.get("case_study")}
    assert {(i.case, i.method) for i in shelf.items} == set(gallery.ITEMS)
    assert {i.case for i in shelf.items} == {"dragin", "seakr", "blendfilter", "drrag"}
    for item in shelf.items:
        trace = shelf.trace(item.key)
        q = cases[item.case]
        assert trace.question == q.question == item.question and item.question_id == q.id
        assert trace.gold.get("answers") == q.answers  # the gold answer travels with the recorded run
        assert trace.model.get("name") == item.model == embedded_display_name(gallery.model_of(item.case, item.method))
        assert trace.corpus.get("spec") == "demo"
        assert item.retrievals == trace.costs.retrievals and item.answer == str(trace.answer or "")
    assert shelf.first is not None and (shelf.first.case, shelf.first.method) == gallery.FIRST


def test_the_gallery_is_small_enough_to_ship() -> None:
    total = sum(p.stat().st_size for p in gallery.GALLERY_DIR.iterdir())
    assert total < MAX_BYTES, f"assets/gallery holds {total / 2**20:.2f} MiB; keep it under {MAX_BYTES / 2**20:.0f}"


def test_each_recorded_run_renders_through_the_run_view(shelf) -> None:
    for item in shelf.items:
        html = render_runs([shelf.trace(item.key)])
        assert f'data-run="{item.run_id}"' in html and 'data-view="done"' in html
        assert 'class="dre-help"' in html  # panel titles link to their help paragraph
        panel = {"seakr": "uncertainty", "blendfilter": "filter", "drrag": "stages"}.get(item.method)
        if panel:
            assert f'data-panel="{panel}"' in html, item.key


def test_a_gallery_of_another_trace_version_is_reported_stale_not_shown(tmp_path: Path) -> None:
    folder = tmp_path / "gallery"
    shutil.copytree(gallery.GALLERY_DIR, folder)
    index = json.loads((folder / gallery.INDEX).read_text(encoding="utf-8"))
    index["trace_version"] = TRACE_VERSION + 1
    (folder / gallery.INDEX).write_text(json.dumps(index), encoding="utf-8")
    stale = gallery.load(folder)
    assert stale.items == [] and f"version {TRACE_VERSION + 1}" in stale.problem
    assert "python -m explorer.ui.runs.gallery" in gallery.is_stale(folder)
    (folder / gallery.INDEX).unlink()
    assert "missing" in gallery.load(folder).problem


def test_a_damaged_trace_file_is_reported_with_its_name(tmp_path: Path) -> None:
    folder = tmp_path / "gallery"
    shutil.copytree(gallery.GALLERY_DIR, folder)
    name = gallery.read_index(folder)["items"][0]["file"]
    (folder / name).write_text('{"version": 1, "events": [', encoding="utf-8")
    broken = gallery.load(folder)
    assert broken.items == [] and name in broken.problem


def test_run_it_live_leaves_a_preset_of_the_recording_model_to_the_apps_model(shelf) -> None:
    """A run recorded on Gemma with its threshold preset, rerun on SmolLM2, takes SmolLM2's own preset."""
    trace = shelf.trace("dragin-dragin")
    gemma, smol = embedded_display_name("gemma3-270m"), embedded_display_name("embedded")
    assert trace.model["name"] == gemma and trace.config_sources["threshold"] == "preset"
    same, other = gallery.live_settings(trace, gemma), gallery.live_settings(trace, smol)
    assert same == trace.config and other["threshold"] == 0.3 != trace.config["threshold"]
    assert {k: v for k, v in other.items() if k != "threshold"} == {k: v for k, v in trace.config.items()
                                                                    if k != "threshold"}
