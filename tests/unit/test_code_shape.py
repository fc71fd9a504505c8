"""The source stays easy to carry on: short import chains, modules and functions, lines of at most
100 characters (measured by tests/code_shape.py)."""

from tests.code_shape import function_lengths, long_lines, longest_import_chain, module_lengths


def test_the_longest_import_chain_is_at_most_9_modules():
    assert len(longest_import_chain()) <= 9, " -> ".join(longest_import_chain())


def test_no_module_is_over_350_lines():
    assert {name: n for name, n in module_lengths().items() if n > 350} == {}


def test_no_function_is_over_50_lines():
    assert {name: n for name, n in function_lengths().items() if n > 50} == {}


def test_no_source_line_is_over_100_characters():
    assert not long_lines(100)
