"""The app's scripting API is exactly its documented endpoints, each with a typed, described answer.

Every other event of the page (tabs, tables, the gallery, the timer) is the page's own wiring and
must not show up in ``/info`` with a generated name such as ``/handler_1`` or outputs called
``value_215``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from explorer.ui.api.endpoints import ENDPOINTS, ForkFacts, ForkSummary, ModelStatus, RunCosts, RunSummary


@pytest.fixture(scope="module")
def api_info(tmp_path_factory) -> dict:
    from explorer.ui.page.app import AppSettings, build_app

    db = Path(tmp_path_factory.mktemp("api")) / "runs.sqlite"
    return build_app(AppSettings(db=db, preload=False)).get_api_info()


def test_only_the_documented_endpoints_are_public(api_info) -> None:
    assert sorted(api_info["named_endpoints"]) == sorted(ENDPOINTS)
    assert not api_info.get("unnamed_endpoints")


@pytest.mark.parametrize("name", ENDPOINTS)
def test_every_endpoint_is_described_and_its_answer_typed(api_info, name: str) -> None:
    endpoint = api_info["named_endpoints"][name]
    assert endpoint["description"].strip(), f"{name} has no description"
    for param in endpoint["parameters"]:  # named, so clients can pass keywords; typed, never Any
        assert param["parameter_name"] and param["python_type"]["type"] != "Any", f"{name}: {param}"
    (answer,) = endpoint["returns"]
    assert answer["python_type"]["type"] != "Any", f"{name} returns an untyped value"
    assert answer["type"].get("type") == "object"


@pytest.mark.parametrize(("name", "typed"), [("/run", RunSummary), ("/status", ModelStatus), ("/fork", ForkSummary)])
def test_answers_list_their_fields(api_info, name: str, typed: type) -> None:
    schema = api_info["named_endpoints"][name]["returns"][0]["type"]
    assert set(schema["properties"]) == set(typed.__annotations__)


def test_run_costs_match_the_trace_costs() -> None:
    from explorer.trace import Costs

    assert set(RunCosts.__annotations__) == set(Costs().to_dict())


def test_fork_answers_are_the_run_summary_plus_fork_facts(api_info) -> None:
    schema = api_info["named_endpoints"]["/fork"]["returns"][0]["type"]
    assert set(RunSummary.__annotations__) < set(schema["properties"])
    assert set(schema["properties"]["fork"]["properties"]) == set(ForkFacts.__annotations__)
