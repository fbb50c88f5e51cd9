"""A lesson's state on the server: the presenter's position, its checks, followers' answers and the tally.

The routes run on a real Starlette app (the one the explorer adds them to), called over HTTP with
Starlette's test client; the event stream itself is exercised by the browser tests
(tests/test_ui_lesson.py). The question a decision is asked by is read from a recorded trace.
"""

from __future__ import annotations

import pytest

from explorer.ui.serving.lesson import LessonError, Lessons, Position, follow_link, parse_position, qr_data_uri, routes

GOOD = {"runs": ["run-a", "run-b"], "view": {"compare": "run-a,run-b"}, "step": 2, "total": 7, "kind": "fired",
        "asking": True, "revealed": False, "choices": ["retrieve", "keep writing"]}


def test_a_position_is_checked_field_by_field() -> None:
    position = parse_position(GOOD, known=lambda run_id: run_id.startswith("run-"))
    assert position.asking and not position.revealed and position.step == 2
    bad = [({**GOOD, "runs": ["<script>"]}, "run ids"), ({**GOOD, "view": {"file": "x"}}, "view must be"),
           ({**GOOD, "view": {"compare": "a,<b>"}}, "not a run id"), ({**GOOD, "step": -1}, "step must be"),
           ({**GOOD, "choices": ["x"] * 5}, "choices"), ({**GOOD, "runs": ["run-a"], "view": {}}, "how to open")]
    for data, message in bad:
        with pytest.raises(LessonError, match=message):
            parse_position(data)
    with pytest.raises(LessonError, match="no stored run 'gone'") as missing:
        parse_position({**GOOD, "runs": ["gone"], "view": {"run": "gone"}}, known=lambda run_id: False)
    assert missing.value.status == 404
    assert not parse_position({**GOOD, "choices": []}).asking  # nothing to answer: nothing asked


def test_answers_are_tallied_for_the_presenter_and_shown_to_followers_once_revealed() -> None:
    lessons = Lessons()
    lesson = lessons.start()
    assert lessons.start(lesson.key, lesson.code) is lesson  # a reloaded presenter page goes on
    assert lessons.start("wrong key", lesson.code) is not lesson
    with pytest.raises(LessonError, match="only the presenter"):
        lessons.presenting(lesson.code, "wrong key")
    lesson.move(parse_position(GOOD))
    a, b, c = lesson.join(), lesson.join(), lesson.join()
    lesson.answer(a, 2, "retrieve")
    lesson.answer(b, 2, "keep writing")
    lesson.answer(c, 2, "keep writing")
    lesson.answer(c, 2, "retrieve")  # a second answer replaces the first
    with pytest.raises(LessonError, match="no longer the one asked"):
        lesson.answer(a, 1, "retrieve")
    with pytest.raises(LessonError, match="choose one of"):
        lesson.answer(a, 2, "maybe")
    with pytest.raises(LessonError, match="not following"):
        lesson.answer("made-up", 2, "retrieve")
    assert lesson.view_for(True)["tally"] == {"retrieve": 2, "keep writing": 1}
    assert "tally" not in lesson.view_for(False)  # followers answer without seeing the class's answers
    lesson.move(parse_position({**GOOD, "revealed": True}))
    assert lesson.view_for(False)["tally"] == {"retrieve": 2, "keep writing": 1}  # revealing keeps the tally
    with pytest.raises(LessonError, match="no question is open"):
        lesson.answer(a, 2, "retrieve")
    lesson.move(parse_position({**GOOD, "step": 3}))
    assert lesson.view_for(True)["tally"] == {"retrieve": 0, "keep writing": 0}  # the next question starts empty


def test_the_follow_link_and_its_qr_code() -> None:
    assert follow_link("http://10.0.0.7:7860/?case=seakr", "ABC234") == "http://10.0.0.7:7860/?follow=ABC234"
    with pytest.raises(LessonError, match="http"):
        follow_link("javascript:alert(1)", "ABC234")
    uri = qr_data_uri("http://10.0.0.7:7860/?follow=ABC234")
    assert uri.startswith("data:image/svg+xml") and "svg" in uri
    assert Position().to_dict()["runs"] == []


def test_the_routes_start_move_and_answer_a_lesson() -> None:
    from starlette.applications import Starlette
    from starlette.testclient import TestClient

    lessons = Lessons(known=lambda run_id: run_id.startswith("run-"))
    client = TestClient(Starlette(routes=routes(lessons)))
    started = client.post("/lesson/start", json={"page": "http://10.0.0.7:7860/"}).json()
    code, key = started["code"], started["key"]
    assert started["link"].endswith(f"?follow={code}") and started["reachable"] is True
    assert client.post(f"/lesson/{code}/position", json={"key": "nope", "position": GOOD}).status_code == 403
    moved = client.post(f"/lesson/{code}/position", json={"key": key, "position": GOOD})
    assert moved.status_code == 200 and moved.json()["step"] == 2
    refused = client.post(f"/lesson/{code}/position", json={"key": key, "position": {**GOOD, "runs": ["x"]}})
    assert refused.status_code == 404 and "no stored run" in refused.json()["error"]
    voter = lessons.get(code).join()
    assert client.post(f"/lesson/{code}/answer", json={"voter": voter, "step": 2, "choice": "retrieve"}).json() == \
        {"ok": True}
    assert lessons.get(code).tally() == {"retrieve": 1, "keep writing": 0}
    assert client.post("/lesson/NOPE99/answer", json={}).status_code == 404
    assert client.post(f"/lesson/{code}/position", content=b"x" * 20_000).status_code == 413


def test_a_recorded_check_is_asked_by_its_values_and_answered_by_what_it_decided() -> None:
    from explorer.ui.panels.decisions import decisions
    from explorer.ui.runs import gallery
    from explorer.ui.views.view import TraceView

    shelf = gallery.load()
    item = next(i for i in shelf.items if i.key == "dragin-dragin")
    found = decisions(TraceView(shelf.trace(item.key)))
    checks = [d for d in found if d.kind in ("fired", "kept")]
    assert checks and all(d.question is not None for d in checks)
    fired = next(d for d in checks if d.kind == "fired")
    assert fired.question.answer == "retrieve" and "θ = " in fired.question.text
    assert all(d.question.answer == "keep writing" for d in checks if d.kind == "kept")
    assert next(d for d in found if d.kind == "answer").question is None
