"""Whatever a user writes into a config number or flag, or whatever bytes a data file holds, kdbench
plans or loads it, or refuses it with one line naming the key or the file: never another
exception."""

from __future__ import annotations

import copy
import math
from functools import cache

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

from kdbench.data.corpus import build_packed_corpus
from kdbench.data.glue import train_subset
from kdbench.errors import KdbenchError
from kdbench.models.tiny import tiny_tokenizer
from kdbench.objectives.losses import LOSSES
from kdbench.planning.group_keys import rule_for
from kdbench.planning.groups import container, data_spec, task_spec
from kdbench.planning.hydra_config import config_dir, group_options
from kdbench.planning.plan import make_plan
from tests.helpers import (
    agnostic_overrides,
    compose_config,
    tiny_overrides,
    write_tiny_corpus,
    write_tiny_glue,
)

# ------------------------------------------------------------------------------------------- config
# numbers

NOT_GROUPS = ("experiment", "hydra")  # presets over the groups' options; Hydra's launchers
NEEDED = {
    "init=layers": ("init.layers=[2,4]",)
}  # what an option leaves to the user, here for the tiny teacher


def leaves(node, at: str):
    """(path, value) of every scalar under a resolved config node."""
    items = (
        node.items()
        if isinstance(node, dict)
        else enumerate(node)
        if isinstance(node, list)
        else None
    )
    if items is None:
        yield at, node
        return
    for key, value in items:
        yield from leaves(value, f"{at}.{key}" if at else str(key))


def governing(path: str) -> str:
    """The key whose rule checks `path`: the path itself, or the list it is an entry of
    (stages.teacher.optimizer.betas.0)."""
    parent, _, last = path.rpartition(".")
    return parent if last.isdigit() and rule_for(path) is None else path


def rule_of(path: str, config: dict):
    """The rule of a config path in `config`: its declaration's, or for a term's parameter
    (objective.terms.0.params.temperature, stages.prediction.objective.terms.0.params.alpha) its
    loss's."""
    parts = path.split(".")
    if "params" in parts[:-1]:  # objective.terms.0.params.temperature, a stage objective's too
        at = parts.index("params")
        term = value_at(config, ".".join(parts[:at]))
        return LOSSES[term["loss"]].param_rules.get(parts[at + 1])
    return rule_for(path)


def is_setting(path: str, value) -> bool:
    """A number or a flag, or a null a rule gives a meaning to (data.train_limit: null or a
    count)."""
    return isinstance(value, (bool, int, float)) or (
        value is None and rule_for(governing(path)) is not None
    )


@cache
def composed(overrides: tuple[str, ...]):
    return compose_config(list(overrides))


@cache
def plans(overrides: tuple[str, ...]) -> bool:
    """Whether a tiny run with these overrides plans (no: a checkpoint teacher, whose config is on
    the Hub)."""
    if composed(overrides).teacher.get("name_or_path"):
        return False
    try:
        make_plan(composed(overrides))
    except KdbenchError:
        return False
    return True


def with_option(base: tuple[str, ...], group: str, option: str) -> tuple[str, ...]:
    """`base` with the group's option, less the base's own settings of that group (corpus.path
    belongs to corpus=local alone)."""
    return (
        *(o for o in base if not o.startswith((f"{group}=", f"{group}."))),
        f"{group}={option}",
        *NEEDED.get(f"{group}={option}", ()),
    )


@pytest.fixture(scope="session")
def config_settings(tiny_glue, tmp_path_factory) -> list[tuple[str, object, tuple[str, ...]]]:
    """Every number and flag any option of any group sets: (path, default, the overrides of a tiny
    run that plans with it). A key only options that cannot plan here have (a Hub teacher's) is set
    on the tiny run instead."""
    tmp = tmp_path_factory.mktemp("settings")
    tiny = tuple(tiny_overrides(tiny_glue, tmp / "run"))
    bases = {
        "corpus": tuple(agnostic_overrides(write_tiny_corpus(tmp / "corpus"), tmp / "run"))
    }  # read there only
    groups = sorted(
        p.name for p in config_dir().iterdir() if p.is_dir() and p.name not in NOT_GROUPS
    )
    top = {key: value for key, value in container(composed(tiny)).items() if key not in groups}
    found = {path: (value, tiny) for path, value in leaves(top, "") if is_setting(path, value)}
    for group in groups:
        base = bases.get(group, tiny)
        for option in group_options(group):
            values = container(
                composed((f"{group}={option}", *NEEDED.get(f"{group}={option}", ())))[group]
            )
            for path, value in leaves(values, group):
                if path not in found and is_setting(path, value):
                    context = with_option(base, group, option)
                    found[path] = (value, context if plans(context) else base)
    return sorted((path, value, context) for path, (value, context) in found.items())


def test_every_config_number_and_flag_has_a_rule(config_settings):
    keys_of = {path.split(".")[0] for path, _, _ in config_settings}
    assert keys_of >= {
        "augment",
        "corpus",
        "data",
        "init",
        "objective",
        "student",
        "task",
        "teacher",
        "trainer",
        "seed",
    }
    assert [
        path
        for path, _, context in config_settings
        if rule_of(governing(path), container(composed(context))) is None
    ] == []


def value_at(node, path: str):
    for part in path.split("."):
        node = node[int(part)] if isinstance(node, list) else node[part]
    return node


def plausible(value, default, rule) -> bool:
    """What a key never admits: NaN, infinities, text, a negative number, a flag for a number or the
    reverse. A key whose default is null (a flag or number left to the code) takes either; one
    whose rule gives null a meaning ("or null (...)") takes null."""
    if value is None and ", or null (" in rule.text:
        return True
    if isinstance(value, bool) or isinstance(default, bool):
        return isinstance(value, bool) and (default is None or isinstance(default, bool))
    return value is None or (
        isinstance(value, (int, float)) and math.isfinite(value) and value >= 0
    )


VALUES = st.one_of(
    st.integers(-3, 6), st.integers(), st.floats(), st.booleans(), st.none(), st.text(max_size=6)
)


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_any_config_value_plans_or_is_refused_naming_its_key(config_settings, data):
    path, default, context = data.draw(st.sampled_from(config_settings))
    value = data.draw(VALUES)
    cfg = copy.deepcopy(composed(context))
    OmegaConf.update(cfg, path, value, force_add=True)
    key = governing(path)
    rule = rule_of(key, container(cfg))  # one value of a list key stands for a list of one
    admitted = rule.admits(rule.listed(value_at(container(cfg), key)))
    try:
        make_plan(cfg)
    except KdbenchError as exc:
        message = str(exc)
        assert "\n" not in message
        # a value out of its own range is named as key=value; one in range, by the key in the
        # relation it breaks
        assert (key.rpartition(".")[2] if admitted else f"{key}=") in message, message
    else:
        listed = rule.entry is not None  # its entries' own rule judged the value
        assert admitted and (listed or plausible(value, default, rule)), (
            f"{path}={value!r} was accepted"
        )


# -----------------------------------------------------------------------------------------------
# data files

GLUE_FILES = {
    "sst2": "SST-2/train.tsv",
    "rte": "RTE/train.tsv",
    "stsb": "STS-B/train.tsv",
}  # single, pair, regression
CORPUS_OPENINGS = {
    "text": b"a first document\n\n",
    "wikiextractor": b'<doc id="1" url="u" title="t">\n',
}
BYTES = st.tuples(
    st.booleans(), st.binary(max_size=300)
)  # (after a well-formed first line?, the bytes)


@pytest.fixture(scope="module")
def glue_tasks(tmp_path_factory) -> dict:
    """{task: (its spec, the data spec of a tiny GLUE folder, its training file, that file's header
    line)}."""
    root = write_tiny_glue(tmp_path_factory.mktemp("bytes-glue"))
    tasks = {}
    for task, file in GLUE_FILES.items():
        cfg = compose_config([f"task={task}", f"data.glue_dir={root}"])
        header = (root / file).read_bytes().splitlines(keepends=True)[0]
        tasks[task] = (task_spec(cfg.task), data_spec(cfg.data), root / file, header)
    return tasks


@pytest.mark.parametrize("task", sorted(GLUE_FILES))
@settings(max_examples=30, deadline=None)
@given(content=BYTES)
def test_any_bytes_in_a_glue_file_load_or_are_refused_naming_it(glue_tasks, task, content):
    spec, data, path, header = glue_tasks[task]
    after_header, raw = content
    path.write_bytes((header if after_header else b"") + raw)
    try:
        examples = train_subset(spec, data)
    except KdbenchError as exc:
        assert str(path) in str(exc) and "\n" not in str(exc), str(exc)
    else:
        assert len(examples) >= 1


@pytest.fixture(scope="module")
def corpus_place(tmp_path_factory):
    """(a folder for the corpus file, the tiny teacher's tokenizer, a cache folder)."""
    tmp = tmp_path_factory.mktemp("bytes-corpus")
    return tmp, tiny_tokenizer(tmp / "tokenizer"), tmp / "cache"


@pytest.mark.parametrize("fmt", sorted(CORPUS_OPENINGS))
@settings(max_examples=30, deadline=None)
@given(content=BYTES)
def test_any_bytes_in_a_corpus_file_load_or_are_refused_naming_it(corpus_place, fmt, content):
    folder, tokenizer, cache_dir = corpus_place
    path = folder / f"corpus.{fmt}"
    after_opening, raw = content
    path.write_bytes((CORPUS_OPENINGS[fmt] if after_opening else b"") + raw)
    try:
        corpus = build_packed_corpus(path, fmt, tokenizer, 16, cache_dir)
    except KdbenchError as exc:
        assert str(path) in str(exc) and "\n" not in str(exc), str(exc)
    else:
        assert len(corpus.train) >= 1
