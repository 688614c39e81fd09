"""Property-based and fuzz tests (issue 8): bad values and bad files only ever give the
library's own errors.

- ``build_options`` (and the decorator and region built from it): any value gives valid
  ``Options`` or a ``ConfigError``, never another exception, and what it accepts is normalised;
- ``ProfileResult.from_dict`` / ``Comparison.from_dict`` / ``load()`` on generated dicts: a
  result, or a ``RunLoadError``; and an accepted result renders, serialises and loads again;
- a fuzz run of ``load()`` and ``neuronscope show`` over a real ``result.json`` mutated by byte
  flips, truncations, splices and JSON-level type swaps: no exception but ``NeuronscopeError``,
  exit status 0 or 2.

Example counts are modest so the module stays within a few seconds' budget per property.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import random
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from neuronscope import NeuronscopeError, load, neuron_region, profile_on_neuron
from neuronscope.cli import main as cli_main
from neuronscope.config import BACKENDS, NEURON_MODES, Options, build_options
from neuronscope.errors import ConfigError, RunLoadError
from neuronscope.result.comparison import Comparison, ComparisonRow
from neuronscope.result.hint import Hint
from neuronscope.result.stats import OpStat, RegionStat
from neuronscope.result.types import ProfileResult


def fuzz(examples: int) -> settings:
    """Modest example counts; no example database (it would write .hypothesis/ into the tree)."""
    return settings(
        max_examples=examples,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )

#: Bad inputs tried, for the report (printed when NEURONSCOPE_TALLY=1).
TRIED = {"options": 0, "dicts": 0, "files": 0, "mutations": 0}


@pytest.fixture(scope="module", autouse=True)
def _tally() -> Iterator[None]:
    yield
    if os.environ.get("NEURONSCOPE_TALLY"):
        sys.__stdout__.write(f"\nfuzz tally: {json.dumps(TRIED)}\n")


# ---- options --------------------------------------------------------------------------------

OPTION_KEYS = sorted(Options.__dataclass_fields__) + ["bogus", "warm_up", "outputdir"]

_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-3, max_value=5000),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.binary(max_size=6),
    st.sampled_from(
        ["auto", "cpu", "CPU", "cuda", "neuron", "Neuron", "runtime", "DEVICE", "cpu-util", "host_memory",
         "0,1,4-7", "0-3", "3-1", "7", " 2 ", "0-99999999", "1" * 30, "", " ", "json", "gz", "none", "a\x00b"]
    ),
)
OPTION_VALUES = st.one_of(
    _scalars,
    st.lists(_scalars, max_size=4),
    st.tuples(_scalars, _scalars),
    st.frozensets(st.integers(min_value=-2, max_value=9000), max_size=4),
    st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
    st.builds(Path, st.text(max_size=12)),
)


def _check_normalised(o: Options) -> None:
    assert o.backend in BACKENDS
    assert o.name is None or (isinstance(o.name, str) and o.name.strip())
    assert o.output_dir is None or (isinstance(o.output_dir, str) and o.output_dir and "\x00" not in o.output_dir)
    for key in ("export", "record_shapes", "with_stack", "profile_memory", "enabled", "hints", "print_summary"):
        assert isinstance(getattr(o, key), bool), key
    assert isinstance(o.warmup, int) and not isinstance(o.warmup, bool) and o.warmup >= 0
    assert o.active is None or (isinstance(o.active, int) and not isinstance(o.active, bool) and o.active >= 1)
    assert o.modes and all(m in NEURON_MODES for m in o.modes) and len(set(o.modes)) == len(o.modes)
    assert o.cores is None or (o.cores and list(o.cores) == sorted(set(o.cores)) and all(isinstance(c, int) and 0 <= c <= 4095 for c in o.cores))
    assert o.trace_format in ("auto", "json", "gz", "none")
    json.dumps(o.to_dict())  # what results record must serialise


@fuzz(200)
@given(st.dictionaries(st.sampled_from(OPTION_KEYS), OPTION_VALUES, max_size=6))
# Found by hand and kept: int() of 5000 digits raised ValueError; "0-5000" and 10**30 passed.
@example({"cores": "1" * 5000})
@example({"cores": "0-5000"})
@example({"cores": [10**30]})
@example({"output_dir": "runs\x00here"})
def test_build_options_gives_options_or_config_error(given_options: dict[str, Any]) -> None:
    TRIED["options"] += 1
    try:
        options = build_options(None, **given_options)
    except ConfigError as exc:
        assert str(exc)  # says what was wrong
        return
    _check_normalised(options)


@fuzz(80)
@given(st.dictionaries(st.sampled_from(OPTION_KEYS[:-3]), OPTION_VALUES, max_size=5))
def test_decorator_and_region_fail_only_with_neuronscope_errors(given_options: dict[str, Any]) -> None:
    """What the user types at decoration time: either a wrapper, or NeuronscopeError (a bad
    option, or a backend this machine lacks)."""
    TRIED["options"] += 1
    for build in (lambda: profile_on_neuron(**given_options)(lambda: None), lambda: neuron_region(**given_options)):
        try:
            built = build()
        except NeuronscopeError:
            continue
        assert built is not None


# ---- generated dicts ------------------------------------------------------------------------

JSON_SCALAR = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=8)
JSON = st.recursive(
    JSON_SCALAR,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=4,
)


def _fields(cls: type) -> list[str]:
    return list(cls.__dataclass_fields__)  # type: ignore[attr-defined]


def _record(cls: type) -> st.SearchStrategy[Any]:
    """Dicts with the field names of ``cls`` (and a stray key) holding any JSON value."""
    return st.dictionaries(st.sampled_from(_fields(cls) + ["extra"]), JSON, max_size=5)


RESULT_FIELDS = {
    "ops": st.lists(_record(OpStat) | JSON, max_size=3),
    "hints": st.lists(_record(Hint) | JSON, max_size=3),
    "regions": st.dictionaries(st.text(max_size=5), _record(RegionStat) | JSON, max_size=3) | JSON,
    "ranks": st.lists(st.dictionaries(st.sampled_from(["rank", "wall_time_us", "total_op_us", "top_op"]), JSON) | JSON, max_size=3) | JSON,
    "schema_version": st.one_of(st.integers(min_value=-2, max_value=3), JSON),
    "type": st.sampled_from(["ProfileResult", "Comparison", "Other"]) | JSON,
}
# The plain fields get scalars, and now and then a container (generating deep values for all
# two dozen fields on every example made this property five times slower, for nothing).
RESULT_FIELDS.update(
    {k: JSON_SCALAR | st.just([]) | st.just({}) for k in ProfileResult("x", "cpu").to_dict() if k not in RESULT_FIELDS}
)


def _good_result() -> ProfileResult:
    return ProfileResult(
        name="good",
        backend="cpu",
        wall_time_us=100.0,
        ops=[OpStat("aten::mul", 2, 3.0, 4.0, input_shapes=[[[2, 2]]]), OpStat("aten::add", 1, 1.0, 1.0)],
        hints=[Hint("fusion", "elementwise_chain", ["aten::mul", "aten::add"], time_us=4.0, suggestion="torch.compile")],
        regions={"inner": RegionStat("inner", 1, 5.0, ops=[OpStat("aten::mul", 1, 1.0, 1.0)])},
        ranks=[{"rank": 0, "wall_time_us": 100.0, "total_op_us": 4.0, "top_op": "aten::mul"}],
        rank=0,
        world_size=1,
    )


def _usable(result: ProfileResult | Comparison) -> None:
    """What a loaded result must allow: render, serialise, and load again."""
    text = result.table()
    assert isinstance(text, str)
    again = json.loads(result.to_json())
    reloaded = type(result).from_dict(again)
    assert reloaded.name == result.name


@fuzz(100)
@given(st.fixed_dictionaries({}, optional=RESULT_FIELDS), st.booleans())
# Kept: int(inf) raised OverflowError; ranks of numbers loaded, then broke `show`.
@example({"ops": [{"name": "aten::mul", "calls": math.inf}]}, True)
@example({"wall_time_us": 1e400, "pid": math.inf}, True)
@example({"ranks": [1, "a"]}, True)
@example({"ranks": [{"rank": 0, "wall_time_us": "slow"}]}, True)
def test_from_dict_gives_a_result_or_run_load_error(fields: dict[str, Any], over_a_good_one: bool) -> None:
    TRIED["dicts"] += 1
    data = {**_good_result().to_dict(), **fields} if over_a_good_one else fields
    try:
        result = ProfileResult.from_dict(data)
    except RunLoadError:
        return
    _usable(result)


COMPARISON_FIELDS = {
    "rows": st.lists(_record(ComparisonRow) | JSON, max_size=3) | JSON,
    "results": st.dictionaries(st.text(max_size=4), st.fixed_dictionaries({}, optional=RESULT_FIELDS) | JSON, max_size=2) | JSON,
    "schema_version": st.integers(min_value=0, max_value=2) | JSON,
    "type": st.just("Comparison") | JSON,
    "name": JSON,
    "notes": JSON,
    "backend": JSON,
}


@fuzz(60)
@given(st.fixed_dictionaries({}, optional=COMPARISON_FIELDS))
def test_comparison_from_dict_gives_a_comparison_or_run_load_error(fields: dict[str, Any]) -> None:
    TRIED["dicts"] += 1
    try:
        cmp = Comparison.from_dict(fields)
    except RunLoadError:
        return
    _usable(cmp)


@contextlib.contextmanager
def _scratch() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="ns-fuzz-") as tmp:
        yield Path(tmp)


def _show(path: Path) -> int:
    """``neuronscope show PATH``, its output swallowed."""
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
        status = cli_main(["show", str(path)])
    assert "Traceback" not in err.getvalue()
    return status


@fuzz(40)
@given(st.fixed_dictionaries({}, optional=RESULT_FIELDS), st.booleans())
def test_load_and_show_on_generated_files(fields: dict[str, Any], over_a_good_one: bool) -> None:
    TRIED["files"] += 1
    data = {**_good_result().to_dict(), **fields} if over_a_good_one else fields
    with _scratch() as run:
        (run / "result.json").write_text(json.dumps(data, default=str))
        try:
            loaded = load(run)
        except RunLoadError as exc:
            assert str(run) in str(exc)  # names the file
            assert _show(run) == 2
            return
        _usable(loaded)
        assert _show(run) == 0


# ---- mutation fuzz of real result.json files ------------------------------------------------


@pytest.fixture(scope="module")
def seed_files(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """result.json texts to mutate: a real capture (with regions and shapes) and a comparison."""
    x = torch.randn(8, 32)
    with neuron_region("seed", backend="cpu", export=False) as r:
        with neuron_region("rms", backend="cpu"):
            torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * x
    assert r.result is not None
    result = r.result
    cmp = Comparison(
        name="cmp",
        rows=[ComparisonRow("a", 10.0, 3, "aten::mul", 1.0), ComparisonRow("b", 5.0, 1, "aten::rms_norm", 2.0, repeats=3)],
        results={"a": _good_result(), "b": result},
        backend="cpu",
    )
    return [result.to_json(), cmp.to_json(), _good_result().to_json(indent=None)]


_SWAPS: list[Any] = [None, True, 0, -1, 1e308, float("inf"), 10**30, "", "text", [], [1, "a"], {}, {"k": [None]}]


def _paths(node: Any, here: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield here
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, here + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, here + (i,))


def _set(root: Any, path: tuple[Any, ...], value: Any, delete: bool = False) -> Any:
    if not path:
        return value
    parent = root
    for key in path[:-1]:
        parent = parent[key]
    if delete:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return root


def _mutate(text: str, rng: random.Random) -> bytes:
    data = text.encode()
    kind = rng.choice(["flip", "truncate", "splice", "swap", "delete", "swap", "swap"])
    if kind == "flip":
        out = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            i = rng.randrange(len(out))
            out[i] ^= 1 << rng.randrange(8)
        return bytes(out)
    if kind == "truncate":
        return data[: rng.randrange(len(data))]
    if kind == "splice":
        i, j = sorted(rng.randrange(len(data)) for _ in range(2))
        return data[:i] + bytes(rng.randrange(256) for _ in range(rng.randint(0, 6))) + data[j:]
    tree = json.loads(text)
    path = rng.choice(list(_paths(tree)))
    if kind == "delete" and path:
        tree = _set(tree, path, None, delete=True)
    else:
        tree = _set(tree, path, rng.choice(_SWAPS))
    return json.dumps(tree, allow_nan=True).encode()


@pytest.mark.slow
def test_load_survives_mutated_result_files(seed_files: list[str], tmp_path: Path) -> None:
    rng = random.Random(20240608)
    run = tmp_path / "run"
    run.mkdir()
    path = run / "result.json"
    outcomes = {"loaded": 0, "refused": 0}
    failures: list[str] = []
    for i in range(600):
        seed = seed_files[i % len(seed_files)]
        blob = _mutate(seed, rng)
        path.write_bytes(blob)
        TRIED["mutations"] += 1
        try:
            loaded = load(run)
        except NeuronscopeError as exc:
            outcomes["refused"] += 1
            if str(run) not in str(exc):
                failures.append(f"#{i}: the message does not name the file: {exc}")
            continue
        except Exception as exc:
            failures.append(f"#{i}: {type(exc).__name__}: {exc} <- {blob[:120]!r}")
            continue
        outcomes["loaded"] += 1
        try:
            _usable(loaded)
        except Exception as exc:
            failures.append(f"#{i}: loaded but unusable: {type(exc).__name__}: {exc}")
        if i % 20 == 0 and _show(run) != 0:
            failures.append(f"#{i}: show failed on a run that loads")
    assert not failures, "\n".join(failures[:10])
    # The mutations reach both outcomes (a fuzz that only ever refuses proves little).
    assert outcomes["loaded"] > 40 and outcomes["refused"] > 40, outcomes


def test_nan_and_infinity_are_written_as_null_and_load_again() -> None:
    """result.json is strict JSON (jq and JSON.parse refuse a bare NaN / Infinity): a
    non-finite number is written as null, and null loads as the field's default."""
    result = _good_result()
    result = replace(result, wall_time_us=math.inf, ops=[replace(result.ops[0], self_device_us=math.nan), *result.ops[1:]])

    def refuse(constant: str) -> Any:
        raise ValueError(f"{constant} is no JSON")

    loaded = ProfileResult.from_dict(json.loads(result.to_json(), parse_constant=refuse))
    assert loaded.wall_time_us == 0.0 and loaded.ops[0].self_device_us is None
    _usable(loaded)
