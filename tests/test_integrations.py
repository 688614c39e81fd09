"""The trainer integrations, run with the real libraries: a Hugging Face ``Trainer`` fine-tuning a
two-layer Llama built from its config (random weights, random tokens: nothing is downloaded),
and a Lightning ``Trainer`` fitting a small module with a hand-written RMSNorm, a few steps on
CPU each. Which steps were captured, their regions, a hint on the hand-written idiom, the run
directories, and that the other steps ran with no hook of ours installed.
"""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from neuronscope import load
from neuronscope.errors import ConfigError
from neuronscope.result.types import ProfileResult

transformers = pytest.importorskip("transformers")
pl = pytest.importorskip("lightning.pytorch")
pytest.importorskip("accelerate")  # the Trainer needs it

from tiny_trainer import Tokens, cpu_args, tiny_llama

from neuronscope.integrations.lightning import NeuronscopeProfiler
from neuronscope.integrations.transformers import ProfileCallback

pytestmark = [
    pytest.mark.slow,
    # Lightning 2.6's own pytree helper still calls an API torch deprecated (torch.utils._pytree's
    # LeafSpec); nothing in these tests or in neuronscope can avoid it.
    pytest.mark.filterwarnings("ignore:`isinstance\\(treespec, LeafSpec\\)` is deprecated"),
]

ORIGINAL_BACKWARD = torch.Tensor.backward


def _constants_observable() -> bool:
    """Whether the observation pass reads an idiom's constants (eps) here: only while no
    torch.compile ran in this process (after one it follows lines with a tracer instead of a
    torch function mode, which sees no constants; capture/observe.py says why)."""
    eval_frame = sys.modules.get("torch._dynamo.eval_frame")
    return not any(b is not None for b in (getattr(eval_frame, "cached_backends", None) or {}).values())


def _hooks_of_ours_installed(model: nn.Module | None = None) -> bool:
    from torch.optim import optimizer as opt

    installed = torch.Tensor.backward is not ORIGINAL_BACKWARD or bool(opt._global_optimizer_pre_hooks)
    if model is not None:
        installed = installed or bool(model._forward_pre_hooks) or bool(model._forward_hooks)
    return installed


class _Lines(logging.Handler):
    """The one line per capture, as the ``neuronscope`` logger emits it."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture
def lines() -> Iterator[list[str]]:
    logger = logging.getLogger("neuronscope")
    handler, level = _Lines(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    yield handler.lines
    logger.removeHandler(handler)
    logger.setLevel(level)


def _runs(root: Path) -> list[Path]:
    return sorted(p.parent for p in root.glob("*/*/result.json"))


# ---- Hugging Face Trainer ------------------------------------------------------------------


class _Probe(transformers.TrainerCallback):  # type: ignore[misc]
    """Listed after ProfileCallback: what each step ran with, seen from inside it."""

    def __init__(self, raise_at: int | None = None) -> None:
        self.seen: dict[int, tuple[bool, bool]] = {}
        self.raise_at = raise_at

    def on_step_begin(self, args: Any, state: Any, control: Any, model: nn.Module, **kwargs: Any) -> None:
        self.seen[state.global_step + 1] = (torch.autograd.profiler._is_profiler_enabled, _hooks_of_ours_installed(model))

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step + 1 == self.raise_at:
            raise KeyError("the user's own error")


def _train(tmp: Path, callback: ProfileCallback, probe: _Probe, max_steps: int = 4) -> nn.Module:
    model = tiny_llama()
    args = cpu_args(str(tmp / "hf"), max_steps, gradient_accumulation_steps=2, learning_rate=1e-3)
    transformers.Trainer(model=model, args=args, train_dataset=Tokens(), callbacks=[callback, probe]).train()
    return model


def test_hf_trainer_captures_the_chosen_steps_only(tmp_path: Path, lines: list[str]) -> None:
    root = tmp_path / "runs"
    callback = ProfileCallback(steps=[2, 4], name="tiny_llama", output_dir=str(root))
    probe = _Probe()
    model = _train(tmp_path, callback, probe)

    # Steps 2 and 4 ran inside a capture with the hooks in; 1 and 3, each the step before a
    # captured one, under the observation pass alone (a profiler, none of the hooks), as a
    # decorated function's last warm-up call is.
    assert probe.seen == {1: (True, False), 2: (True, True), 3: (True, False), 4: (True, True)}
    assert not _hooks_of_ours_installed(model)
    assert [r.name for r in callback.results] == ["tiny_llama.step2", "tiny_llama.step4"]

    # One run directory per captured step, and the one line per capture that says where.
    runs = _runs(root)
    assert [p.parent.name for p in runs] == ["tiny_llama.step2", "tiny_llama.step4"]
    assert [r.run_dir for r in callback.results] == [str(p) for p in runs]
    for result in callback.results:
        assert sum(f"{result.name} ok" in line and str(result.run_dir) in line for line in lines) == 1

    for result in callback.results:
        assert result.status == "ok"
        regions = result.regions
        # Gradient accumulation: two micro-batches, each one forward and one backward.
        assert regions["forward"].calls == 2 and regions["backward"].calls == 2
        assert regions["optimizer"].calls == 1
        assert "aten::mm" in regions["forward"].op_names
        assert any("Backward" in op for op in regions["backward"].op_names)
        assert not any("Backward" in op for op in regions["forward"].op_names)
        # The update alone: AdamW's op, no matmul of the forward or the backward.
        assert any("adam" in op.lower() for op in regions["optimizer"].op_names)
        assert "aten::mm" not in regions["optimizer"].op_names
        assert regions["forward"].time_us + regions["backward"].time_us < regions[result.name].time_us
        # LlamaRMSNorm is the hand-written idiom (pow, mean, add, rsqrt, mul, mul by weight).
        rms = [h for h in result.hints if h.kind == "fusion" and h.pattern == "rms_norm"]
        assert rms and rms[0].ops[:4] == ["aten::pow", "aten::mean", "aten::add", "aten::rsqrt"]
        # As a decorated forward gives them: the model's line and the idiom's eps (the step
        # before each captured one was observed, as a decorator's last warm-up call is).
        assert rms[0].location is not None and "modeling_llama.py:" in rms[0].location, rms[0]
        assert "eps=1e-06" in rms[0].suggestion or not _constants_observable(), rms[0].suggestion
        # The module tree of the step, and no torch class replaced to label the backward.
        assert any(m.name.endswith("layers.0.mlp") for m in result.modules)
    assert torch.Tensor.backward is ORIGINAL_BACKWARD

    reloaded = load(runs[0])
    assert isinstance(reloaded, ProfileResult)
    assert reloaded.name == "tiny_llama.step2" and set(reloaded.regions) >= {"forward", "backward", "optimizer"}


def test_hf_callback_takes_a_range_of_steps_as_it_is() -> None:
    callback = ProfileCallback(steps=range(100, 10**12, 1000))
    assert isinstance(callback.steps, range) and 1100 in callback.steps and 1101 not in callback.steps


def test_hf_trainer_keeps_a_step_that_raised_and_passes_the_error_through(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    callback = ProfileCallback(steps=2, output_dir=str(root))
    with pytest.raises(KeyError, match="the user's own error"):
        _train(tmp_path, callback, _Probe(raise_at=2), max_steps=3)
    assert callback.results == []  # the capture is still open: the Trainer never ended the step
    callback.close()  # what the next train() or the interpreter's exit does by itself
    (result,) = callback.results
    assert result.status == "error" and "StepNotFinished" in (result.error or "")
    assert result.regions["forward"].calls == 2 and "optimizer" not in result.regions
    assert _runs(root) == [Path(result.run_dir or "")]
    assert not _hooks_of_ours_installed()


def test_hf_trainer_captures_nothing_when_disabled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEURONSCOPE_DISABLE", "1")
    root = tmp_path / "runs"
    callback = ProfileCallback(steps=[1, 2], output_dir=str(root))
    probe = _Probe()
    _train(tmp_path, callback, probe, max_steps=2)
    assert callback.results == [] and not root.exists()
    assert probe.seen == {1: (False, False), 2: (False, False)}


@pytest.mark.parametrize(
    ("kwargs", "said"),
    [
        ({"steps": 0}, "whole numbers from 1"),
        ({"steps": range(10)}, "whole numbers from 1"),
        ({"steps": range(5, 5)}, "steps is empty"),
        ({"steps": [2, True]}, "whole numbers from 1"),
        ({"steps": []}, "steps is empty"),
        ({"steps": "3"}, "whole numbers"),
        ({"steps": 2, "warmup": 1}, "steps=/schedule="),
        ({"steps": 2, "backend": "tpu"}, "backend"),
    ],
)
def test_hf_callback_refuses_bad_options_when_built(kwargs: dict[str, Any], said: str) -> None:
    with pytest.raises(ConfigError, match=said):
        ProfileCallback(**kwargs)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _torchrun(mode: str, out: Path) -> tuple[dict[str, Any], dict[str, Any], str]:
    """Run tests/integrations_dist_worker.py MODE under real torchrun (two CPU processes, gloo);
    each rank's record, and the processes' stderr."""
    import json
    import os

    import torch.distributed as dist

    if not (dist.is_available() and dist.is_gloo_available()):
        pytest.skip("torch.distributed with gloo is not available")
    worker = Path(__file__).with_name("integrations_dist_worker.py")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", "--nproc_per_node=2"]
    cmd += ["--master_addr=127.0.0.1", f"--master_port={_free_port()}", str(worker), mode, str(out)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rank0, rank1 = (json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1))
    return rank0, rank1, proc.stderr


@pytest.mark.parametrize(
    ("mode", "name", "ddp"),
    [("hf", "ddp_llama.step2", "DistributedDataParallel"), ("lightning", "ddp_lightning.step2", "DDPStrategy")],
)
def test_under_torchrun_every_rank_captures_and_rank_0_gathers(tmp_path: Path, mode: str, name: str, ddp: str) -> None:
    """Real torchrun, two CPU processes on gloo; each trainer wraps the model in DDP."""
    rank0, rank1, stderr = _torchrun(mode, tmp_path)
    assert rank0["ddp"] == ddp and rank0["world"] == 2
    (r0,), (r1,) = rank0["results"], rank1["results"]
    assert r0["name"] == r1["name"] == name
    assert (r0["rank"], r1["rank"]) == (0, 1) and r0["world_size"] == r1["world_size"] == 2
    assert {"forward", "backward", "optimizer", "DistributedDataParallel.forward"} <= set(r0["regions"])
    assert r0["allreduce"] and r1["allreduce"]
    # Rank 0 gathered both ranks; each rank wrote its own run directory, one line on rank 0 only.
    assert [row["rank"] for row in r0["ranks"]] == [0, 1] and r1["ranks"] is None
    assert [row["run_dir"] for row in r0["ranks"]] == [r0["run_dir"], r1["run_dir"]]
    assert r0["run_dir"].endswith("_rank0") and r1["run_dir"].endswith("_rank1")
    assert stderr.count(f"neuronscope: {name} ok") == 1


# ---- Lightning ----------------------------------------------------------------------------


class _RMSNorm(nn.Module):
    """Written out by hand, as many models still do: the idiom the hint should name."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


class _Classifier(pl.LightningModule):  # type: ignore[misc]
    def __init__(self, raise_at: int | None = None) -> None:
        super().__init__()
        self.inp, self.norm, self.out = nn.Linear(32, 64), _RMSNorm(64), nn.Linear(64, 4)
        self.raise_at = raise_at

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        if batch_idx == self.raise_at:
            raise KeyError("the user's own error")
        x, y = batch
        return nn.functional.cross_entropy(self.out(self.norm(self.inp(x))), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


def _fit(tmp: Path, profiler: NeuronscopeProfiler, module: pl.LightningModule, **trainer_args: Any) -> None:
    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(64, 32), torch.randint(0, 4, (64,)))
    trainer = pl.Trainer(
        profiler=profiler,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=str(tmp / "pl"),
        **trainer_args,
    )
    trainer.fit(module, torch.utils.data.DataLoader(data, batch_size=8))


def test_lightning_profiler_captures_the_scheduled_batch_with_regions_and_hint(tmp_path: Path) -> None:
    root = tmp_path / "lightning"
    profiler = NeuronscopeProfiler(dirpath=root, filename="perf", name="clf")
    _fit(tmp_path, profiler, _Classifier(), max_steps=5)

    (result,) = profiler.results  # the default schedule: wait 1, warm up 1, capture batch 2
    assert result.name == "clf.step2" and result.status == "ok"
    assert [p.parent.name for p in _runs(root)] == ["clf.step2"]
    assert _runs(root) == [Path(result.run_dir or "")]
    regions = result.regions
    assert {name: regions[name].calls for name in ("forward", "backward", "optimizer")} == {
        "forward": 1,
        "backward": 1,
        "optimizer": 1,
    }
    # The optimizer label opens when Lightning's closure (forward and backward) has returned.
    assert "aten::addmm" in regions["forward"].op_names
    assert "aten::mm" not in regions["optimizer"].op_names and "aten::addmm" not in regions["optimizer"].op_names
    assert "aten::addcdiv_" in regions["optimizer"].op_names  # AdamW's update, one parameter at a time
    rms = [h for h in result.hints if h.kind == "fusion" and h.pattern == "rms_norm"]
    assert rms and rms[0].ops[:4] == ["aten::pow", "aten::mean", "aten::add", "aten::rsqrt"]
    # As a decorated forward gives them (batch 1, before the captured one, was observed):
    # the line of _RMSNorm's forward in this file, and its eps.
    assert rms[0].location is not None and "test_integrations.py:" in rms[0].location, rms[0]
    assert "eps=1e-06" in rms[0].suggestion or not _constants_observable(), rms[0].suggestion
    assert {"norm", "inp", "out"} <= {m.name for m in result.modules}
    # Lightning's summary at the end of the stage, in Lightning's file name for it.
    summary = (root / "fit-perf.txt").read_text()
    assert "clf.step2" in summary and "rms_norm" in summary and "aten::addmm" in summary
    assert not _hooks_of_ours_installed()


def test_another_librarys_wrapper_of_backward_keeps_working(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another library that wraps ``Tensor.backward`` (before or during the run) meets no patch
    of ours: a captured step once stored such a wrapper as "the original", after which every
    ``backward()`` raised RecursionError. Backward is labelled from hooks now."""
    calls = []
    theirs = torch.Tensor.backward

    def wrapper(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return theirs(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "backward", wrapper)
    profiler = NeuronscopeProfiler(dirpath=tmp_path / "lightning", filename="perf", name="wrapped")
    _fit(tmp_path, profiler, _Classifier(), max_steps=4)
    (result,) = profiler.results
    assert result.status == "ok" and result.regions["backward"].calls == 1
    assert torch.Tensor.backward is wrapper and len(calls) >= 4  # every step's backward went through it
    x = torch.ones(2, requires_grad=True)
    (x * 2).sum().backward()  # and still does, after the capture
    assert x.grad is not None and len(calls) >= 5


def test_lightning_schedule_with_gradient_accumulation(tmp_path: Path) -> None:
    profiler = NeuronscopeProfiler(
        dirpath=tmp_path / "runs", schedule=torch.profiler.schedule(wait=0, warmup=1, active=2), name="acc"
    )
    _fit(tmp_path, profiler, _Classifier(), max_steps=3, accumulate_grad_batches=2)
    # Batches 1 and 2, then recording stops at RECORD_AND_SAVE (Lightning's rule), although the
    # schedule repeats. Batch 1 ends an accumulation (the optimizer steps); batch 2 does not.
    assert [r.name for r in profiler.results] == ["acc.step1", "acc.step2"]
    first, second = profiler.results
    assert "optimizer" in first.regions and "optimizer" not in second.regions
    assert second.regions["forward"].calls == 1 and second.regions["backward"].calls == 1


def test_lightning_keeps_a_batch_that_raised_and_passes_the_error_through(tmp_path: Path) -> None:
    profiler = NeuronscopeProfiler(dirpath=tmp_path / "runs")
    with pytest.raises(KeyError, match="the user's own error"):
        _fit(tmp_path, profiler, _Classifier(raise_at=2), max_steps=5)
    (result,) = profiler.results
    assert result.status == "error" and "the user's own error" in (result.error or "")
    assert result.run_dir is not None and Path(result.run_dir, "result.json").is_file()
    assert not _hooks_of_ours_installed()


@pytest.mark.parametrize(
    ("kwargs", "said"),
    [
        ({"schedule": 3}, "schedule must be"),
        ({"schedule": lambda step: True}, "ProfilerAction"),
        ({"output_dir": "x"}, "dirpath="),
        ({"active": 2}, "steps=/schedule="),
    ],
)
def test_lightning_profiler_refuses_bad_options_when_built(kwargs: dict[str, Any], said: str) -> None:
    with pytest.raises(ConfigError, match=said):
        NeuronscopeProfiler(**kwargs)


def test_importing_neuronscope_imports_neither_library() -> None:
    code = (
        "import sys, neuronscope, neuronscope.cli\n"
        "loaded = [m for m in ('transformers', 'lightning', 'neuronscope.integrations') if m in sys.modules]\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# ---- the examples, as a user runs them -------------------------------------------------------

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _run_example(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / script), *args], check=False, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def test_hf_trainer_example_runs(tmp_path: Path) -> None:
    proc = _run_example("hf_trainer_profile.py", "--output-dir", str(tmp_path), "--step", "2")
    assert "neuronscope: llama_finetune.step2 ok" in proc.stderr
    assert " forward: 2 call(s)" in proc.stdout and "optimizer: 1 call(s)" in proc.stdout
    assert [p.parent.name for p in _runs(tmp_path)] == ["llama_finetune.step2"]


def test_lightning_example_runs(tmp_path: Path) -> None:
    proc = _run_example("lightning_profiler.py", "--dirpath", str(tmp_path))
    assert "fusion:rms_norm" in proc.stdout
    assert [p.parent.name for p in _runs(tmp_path)] == ["classifier.step2"]
