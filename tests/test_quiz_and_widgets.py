import math

import pytest
import torch

from ampcourse.quiz import Question, Quiz, feedback
from ampcourse.widgets import REGISTRY
from ampcourse.widgets.base import LivePlot
from ampcourse.widgets.lesson00 import cast_survival, cast_value

Q = Question("2 + 2?", ["3", "4"], answer=1, why="Arithmetic.")


def test_feedback_is_immediate_and_explains():
    assert feedback(Q, 1) == (True, "Correct. Arithmetic.")
    correct, message = feedback(Q, 0)
    assert not correct and "the answer is “4”" in message and "Arithmetic." in message
    assert feedback(Q, None) == (False, "Pick an answer first.")
    with pytest.raises(ValueError, match="choice must be an option index from 0 to 1"):
        feedback(Q, 2)


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"options": ["only one"]}, "at least 2"),
        ({"options": ["a", "a"]}, "distinct"),
        ({"answer": 5}, "answer must be an index from 0 to 1"),
        ({"answer": True}, "answer must be an index"),
        ({"why": ""}, "why must explain"),
        ({"prompt": " "}, "prompt must be"),
    ],
)
def test_question_validation(kwargs, words):
    args = {"prompt": "p", "options": ["a", "b"], "answer": 0, "why": "w"} | kwargs
    with pytest.raises(ValueError, match=words):
        Question(**args)


def test_quiz_widget_click_shows_feedback():
    quiz = Quiz([Q, Question("Sky?", ["blue", "green", "red"], 0, "Rayleigh scattering.")])
    quiz.buttons[0].click()
    assert "Pick an answer first" in quiz.results[0].value
    quiz.choices[0].value = "3"
    quiz.buttons[0].click()
    assert "<b>Not quite</b>" in quiz.results[0].value and "#b42318" in quiz.results[0].value  # word + red
    quiz.choices[1].value = "blue"
    quiz.buttons[1].click()
    assert "<b>Correct</b>" in quiz.results[1].value and "Rayleigh" in quiz.results[1].value
    assert not any(ch in r.value for r in quiz.results for ch in "✅❌👉")  # readable without emoji fonts
    assert "Q2. Sky?" in quiz._repr_mimebundle_()["text/plain"]
    with pytest.raises(TypeError):
        Quiz([])


@pytest.mark.parametrize("log10_value", [-9.0, -8.0, -6.0, -4.5, 0.0, 3.0, 4.75, 6.0])
def test_cast_value_matches_direct_torch_casts(log10_value):
    value, rows = cast_value(log10_value)
    x = torch.tensor(10.0**log10_value, dtype=torch.float32)
    assert value == x.item()
    for row, dtype in zip(rows, (torch.float32, torch.bfloat16, torch.float16), strict=True):
        stored = x.to(dtype).float().item()
        assert row.stored == stored
        info = torch.finfo(dtype)
        expected = ("underflow to 0" if stored == 0 else "overflow to inf" if math.isinf(stored)
                    else "subnormal" if stored < info.tiny else "normal")
        assert row.status == expected


def test_cast_value_known_cases():
    statuses = {log: [r.status for r in cast_value(log)[1]] for log in (-8.0, -6.0, 5.0)}
    assert statuses[-8.0] == ["normal", "normal", "underflow to 0"]
    assert statuses[-6.0] == ["normal", "normal", "subnormal"]
    assert statuses[5.0] == ["normal", "normal", "overflow to inf"]


def test_cast_value_validates():
    with pytest.raises(ValueError, match=r"log10_value must be in \[-9.0, 6.0\]"):
        cast_value(12)
    with pytest.raises(TypeError, match="log10_value must be a number"):
        cast_value("1e-8")


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_every_registered_widget_follows_its_controls(name):
    factory, moves = REGISTRY[name]
    widget = factory()
    assert isinstance(widget, LivePlot) and len(moves) >= 2
    seen = set()
    for move in moves:
        widget.set(**move)
        assert widget.values() == {**widget.values(), **move}
        seen.add((widget.image.value, widget.readout.value))
    assert len(seen) == len(moves), "some slider moves left the figure and the numbers unchanged"
    with pytest.raises(ValueError, match="unknown control"):
        widget.set(nonsense=1)


def test_dragging_the_slider_redraws():
    widget = cast_survival(-8.0)
    before = (widget.image.value, widget.readout.value)
    widget.controls["log10_value"].value = 2.0  # as the browser does
    assert (widget.image.value, widget.readout.value) != before
    assert "100" in widget.readout.value


def test_table_renders_text_and_html_and_validates():
    from ampcourse.tables import Table

    t = Table([{"a": 1.5, "b": None}, {"a": 10.0, "b": "x<y"}], formats={"a": "{:.1f}"}, title="T")
    assert t.text().splitlines() == ["T", "a     b", "----  ---", "1.5   —", "10.0  x<y"]
    page = t._repr_html_()
    assert '<td style="text-align:left">x&lt;y</td>' in page and ">T</caption>" in page
    assert '<td style="text-align:right">1.5</td>' in page  # numbers right, text left
    assert "table-layout:auto" in page and "overflow-x:auto" in page  # fits its cell, scrolls, never clips
    with pytest.raises(ValueError, match="missing"):
        Table([{"a": 1}], columns=["a", "c"])
    with pytest.raises(TypeError, match="list of dicts"):
        Table([1, 2])
