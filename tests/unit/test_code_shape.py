"""The source stays within the project's line length (tests/code_shape.py measures the rest)."""

from tests.code_shape import long_lines


def test_no_source_line_is_over_100_characters():
    assert not long_lines(100)
