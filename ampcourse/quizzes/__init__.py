"""The end-of-lesson quizzes, one module per lesson: ``lessonNN.questions()`` returns its questions.

They live here, not in the lesson notebooks, so the answer key and the explanations are out of the
learner's view until they answer (the lesson cell is only ``lesson_quiz("NN")``, see
:mod:`ampcourse.quiz`). A question whose answer depends on the installed torch computes it live.
Every lesson has at least one question of kind ``"transfer"`` or ``"diagnosis"``.
"""
