import pytest

from ampcourse.validate import as_float, as_int, as_positive


def test_shared_argument_checks_name_the_argument():
    assert as_int("n", 3, minimum=1) == 3 and as_float("x", 2) == 2.0 and as_positive("s", 0.5) == 0.5
    with pytest.raises(TypeError, match="n must be an int >= 1"):
        as_int("n", True, minimum=1)
    with pytest.raises(ValueError, match="n must be an int >= 1 \\(got 0\\)"):
        as_int("n", 0, minimum=1)
    with pytest.raises(TypeError, match="x must be a real number"):
        as_float("x", "1")
    with pytest.raises(ValueError, match="s must be > 0 and finite"):
        as_positive("s", float("inf"))
