"""The quick-check quiz at the end of each lesson: multiple choice, immediate feedback.

``feedback`` is the pure part (tested); :class:`Quiz` is the ipywidgets front. Each lesson's questions
live in the package (``ampcourse/quizzes/lessonNN.py``), so the answer key is not in the learner's view:
the lesson's quiz cell is only ``lesson_quiz("NN")``.

    Quiz([
        Question("Which dtype keeps FP32's exponent range?", ["float16", "bfloat16"], answer=1,
                 why="bfloat16 has 8 exponent bits, like float32."),
    ])

Feedback is readable without an emoji font: a coloured word (*Correct* / *Not quite*) and the reason.
"""

from __future__ import annotations

import functools
import html
import importlib
from dataclasses import dataclass

import ipywidgets as widgets


@dataclass(frozen=True)
class Question:
    prompt: str
    options: list[str]
    answer: int  # index into options
    why: str  # shown after any answer: the reason, not just "correct"
    kind: str = "recall"  # recall | transfer (apply to a new case) | diagnosis (a symptom: what is wrong?)

    def __post_init__(self) -> None:
        if not isinstance(self.prompt, str) or not self.prompt.strip():
            raise ValueError("prompt must be a non-empty string")
        if not isinstance(self.options, (list, tuple)) or len(self.options) < 2 or not all(
                isinstance(o, str) and o for o in self.options):
            raise ValueError(f"options must be a list of at least 2 non-empty strings (got {self.options!r})")
        if len(set(self.options)) != len(self.options):
            raise ValueError(f"options must be distinct (got {self.options!r})")
        if isinstance(self.answer, bool) or not isinstance(self.answer, int) or not (
                0 <= self.answer < len(self.options)):
            raise ValueError(f"answer must be an index from 0 to {len(self.options) - 1} (got {self.answer!r})")
        if not isinstance(self.why, str) or not self.why.strip():
            raise ValueError("why must explain the answer (a non-empty string)")
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS} (got {self.kind!r})")


KINDS = ("recall", "transfer", "diagnosis")
COLOURS = {True: "#1a7f37", False: "#b42318", None: "#6b4f00"}  # green, red, amber (WCAG AA on white)


def feedback(question: Question, choice: int | None) -> tuple[bool, str]:
    """``(correct, message)`` for the option index the learner chose (None: nothing chosen)."""
    if not isinstance(question, Question):
        raise TypeError(f"question must be a Question (got {type(question).__name__})")
    if choice is None:
        return False, "Pick an answer first."
    if isinstance(choice, bool) or not isinstance(choice, int) or not 0 <= choice < len(question.options):
        raise ValueError(f"choice must be an option index from 0 to {len(question.options) - 1} (got {choice!r})")
    if choice == question.answer:
        return True, f"Correct. {question.why}"
    return False, f"Not quite: the answer is “{question.options[question.answer]}”. {question.why}"


class Quiz(widgets.VBox):
    """One radio group and a *Check* button per question; feedback appears under each."""

    def __init__(self, questions: list[Question]) -> None:
        if not questions or not all(isinstance(q, Question) for q in questions):
            raise TypeError("Quiz takes a non-empty list of Question")
        self.questions = list(questions)
        self.choices: list[widgets.RadioButtons] = []
        self.results: list[widgets.HTML] = []
        self.buttons: list[widgets.Button] = []
        rows = []
        for number, question in enumerate(self.questions, 1):
            choice = widgets.RadioButtons(options=list(question.options), value=None,
                                          layout=widgets.Layout(width="auto"))
            button = widgets.Button(description="Check", button_style="primary")
            result = widgets.HTML()
            button.on_click(functools.partial(self._on_click, len(self.choices)))
            self.choices.append(choice)
            self.buttons.append(button)
            self.results.append(result)
            rows.append(widgets.VBox([
                widgets.HTML(f'<div style="line-height:1.4"><b>Q{number}.</b> {html.escape(question.prompt)}</div>'),
                choice, button, result]))
        super().__init__(rows)

    def _on_click(self, i: int, _button: widgets.Button) -> None:
        self.check(i)

    def check(self, i: int) -> bool:
        """Grade question ``i`` from its current choice and show the feedback."""
        if isinstance(i, bool) or not isinstance(i, int):
            raise TypeError(f"i must be a question number, an int from 0 to {len(self.questions) - 1} (got {i!r})")
        if not 0 <= i < len(self.questions):
            raise ValueError(f"i must be from 0 to {len(self.questions) - 1}: this quiz has {len(self.questions)} "
                             f"question(s) (got {i})")
        chosen = self.choices[i].index
        correct, message = feedback(self.questions[i], chosen)
        self.results[i].value = feedback_html(correct if chosen is not None else None, message)
        return correct

    def _repr_mimebundle_(self, **kwargs):
        bundle = super()._repr_mimebundle_(**kwargs)
        lines = []
        for number, q in enumerate(self.questions, 1):
            lines.append(f"Q{number}. {q.prompt}")
            lines += [f"  ( ) {option}" for option in q.options]
        bundle["text/plain"] = "\n".join(lines)
        return bundle


def feedback_html(correct: bool | None, message: str) -> str:
    """The feedback as HTML: its leading word (Correct / Not quite / Pick an answer first) in bold, all of it
    in a colour that says the same (green, red, amber), so it reads without colour and without emoji fonts."""
    if not (correct is None or isinstance(correct, bool)):
        raise ValueError(f"correct must be True, False or None (got {correct!r})")
    if not isinstance(message, str):
        raise TypeError(f"message must be a str (got {type(message).__name__})")
    head = next((w for w in ("Correct", "Not quite", "Pick an answer first") if message.startswith(w)), "")
    # line-height: ipywidgets gives HTML content the controls' 28 px, which spreads a wrapped line far apart.
    return (f'<div style="line-height:1.4;color:{COLOURS[correct]}"><b>{html.escape(head)}</b>'
            f'{html.escape(message[len(head):])}</div>')


def lesson_questions(number: str) -> list[Question]:
    """The questions of lesson ``number`` ("00" to "09"), from ``ampcourse/quizzes/lessonNN.py``."""
    if not isinstance(number, str) or len(number) != 2 or not number.isdigit():
        raise ValueError(f"number must be a lesson number such as '03' (got {number!r})")
    try:
        module = importlib.import_module(f"ampcourse.quizzes.lesson{number}")
    except ModuleNotFoundError:
        raise ValueError(f"lesson {number} has no quiz (no ampcourse/quizzes/lesson{number}.py)") from None
    return module.questions()


def lesson_quiz(number: str) -> Quiz:
    """The quiz at the end of lesson ``number``: the answers stay in the package, out of the lesson's cells."""
    return Quiz(lesson_questions(number))
