"""The report's number formats: a difference that rounds to zero reads 0.0 with either sign rule,
never -0.0; a missing value is an empty cell."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kdbench.report.text import fmt, signed


@pytest.mark.parametrize("value", [-0.0, -0.04, -1e-15, np.float64(-0.0), 0.0, 0.049])
def test_a_value_that_rounds_to_zero_reads_as_a_positive_zero(value):
    assert (signed(value, 1), fmt(value, 1)) == ("+0.0", "0.0")


@pytest.mark.parametrize(
    "value, digits, text", [(-0.06, 1, "-0.1"), (1.25, 1, "+1.2"), (-3.14159, 2, "-3.14")]
)
def test_a_value_keeps_its_sign_at_the_digits_shown(value, digits, text):
    assert signed(value, digits) == text and fmt(value, digits) == text.lstrip("+")


def test_a_missing_difference_is_an_empty_cell():
    assert signed(math.nan, 1) == ""
