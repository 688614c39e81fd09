"""Options: validation, normalisation, environment."""

from __future__ import annotations

from pathlib import Path

import pytest

from neuronscope import neuron_region
from neuronscope.config import DEFAULT_OUTPUT_DIR, Options, build_options, options_key, parse_cores, parse_modes
from neuronscope.errors import ConfigError, NeuronscopeError


def test_defaults_and_normalisation() -> None:
    opts = build_options(None, backend="CPU", modes=["Runtime", "DEVICE"], cores="0,1,4-7")
    assert opts.backend == "cpu"
    assert opts.modes == ("runtime", "device")
    assert opts.cores == (0, 1, 4, 5, 6, 7)
    assert opts.record_shapes is True and opts.with_stack is False
    assert Options().to_dict()["modes"] == ["runtime"]


@pytest.mark.parametrize(
    "value, expected",
    [(3, (3,)), ([2, 0, 2], (0, 2)), ("0-3", (0, 1, 2, 3)), (" 5 , 1 ", (1, 5)), (None, None)],
)
def test_cores_forms(value: object, expected: tuple[int, ...] | None) -> None:
    assert parse_cores(value) == expected


@pytest.mark.parametrize("value", ["a", "1-", "4-2", [1, "2"], -1, True, [], 1.5])
def test_bad_cores(value: object) -> None:
    with pytest.raises(ConfigError):
        parse_cores(value)


def test_modes_accept_enum_like_members() -> None:
    class ProfileMode:
        def __init__(self, name: str) -> None:
            self.name = name

    assert parse_modes([ProfileMode("RUNTIME"), ProfileMode("HOST_MEMORY")]) == ("runtime", "host_memory")
    assert parse_modes("cpu_util") == ("cpu_util",)
    with pytest.raises(ConfigError, match="empty"):
        parse_modes([])
    with pytest.raises(ConfigError):
        parse_modes([3])


def test_output_root_prefers_option_then_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("NEURONSCOPE_OUTPUT_DIR", str(tmp_path / "env"))
    assert build_options(None).output_root == tmp_path / "env"
    assert build_options(None, output_dir=tmp_path / "opt").output_root == tmp_path / "opt"
    monkeypatch.delenv("NEURONSCOPE_OUTPUT_DIR")
    assert build_options(None).output_root == Path(DEFAULT_OUTPUT_DIR)


def test_config_errors_are_neuronscope_errors_and_value_errors() -> None:
    with pytest.raises(NeuronscopeError) as info:
        build_options(None, trace_format="xml")
    assert isinstance(info.value, ValueError)
    with pytest.raises(ConfigError, match="output_dir must be a path"):
        build_options(None, output_dir=3)


def test_a_region_built_in_a_loop_reuses_its_validated_options_but_still_checks() -> None:
    """``with neuron_region("x"):`` in a loop builds the same options each pass: the second
    region gets the first one's options, and a value equal to a valid one but of the wrong
    type (``1 == True``) is still refused."""
    first = neuron_region("loop", enabled=True, backend="cpu").options
    assert neuron_region("loop", enabled=True, backend="cpu").options is first
    with pytest.raises(ConfigError, match="enabled"):
        neuron_region("loop", enabled=1, backend="cpu")
    assert neuron_region("loop", cores=[0, 1]).options.cores == (0, 1)  # unhashable: built each time
    # Tuples compare their items by value, (0, True) == (0, 1): they are never reused.
    assert neuron_region("loop", cores=(0, 1)).options.cores == (0, 1)
    with pytest.raises(ConfigError, match="cores"):
        neuron_region("loop", cores=(0, True))
    assert options_key({"enabled": 1}) != options_key({"enabled": True})


def test_a_path_object_is_read_each_time(tmp_path: Path) -> None:
    class Moving:
        def __init__(self) -> None:
            self.path = str(tmp_path / "a")

        def __fspath__(self) -> str:
            return self.path

    where = Moving()
    assert build_options(None, output_dir=where).output_dir == str(tmp_path / "a")
    where.path = str(tmp_path / "b")
    assert build_options(None, output_dir=where).output_dir == str(tmp_path / "b")


@pytest.mark.parametrize("value", ["1", "true", " TRUE ", "Yes", "on", "0", "false", "", "no", "2", "ön"])
def test_the_kill_switch_reads_the_environment_as_env_true_does(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    """disabled_by_env() reads CPython's byte store behind os.environ (for speed): it must
    agree with the plain reading, and follow os.environ's changes at once."""
    from neuronscope.config import DISABLE_ENV, disabled_by_env, env_true

    monkeypatch.setenv(DISABLE_ENV, value)
    assert disabled_by_env() == env_true(DISABLE_ENV)
    monkeypatch.delenv(DISABLE_ENV)
    assert not disabled_by_env()
