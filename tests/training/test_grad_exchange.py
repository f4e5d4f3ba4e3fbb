"""Gradient-exchange settings: defaults reach TrainingArguments and DDP, users can override them, and
the bf16 hook averages bf16-rounded gradients over gloo on CPU."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from xeoncluster.node.startup import run_config
from xeoncluster.node.startup.cli import parse
from xeoncluster.node.startup.grad_exchange import bf16_gloo_hook, tuned_ddp_handler
from xeoncluster.node.startup.stack_check import StackPlan
from xeoncluster.node.startup.trainer_setup import training_arguments

SINGLE = StackPlan(stack="stock", backend=None, use_ipex=False)


def _args(tmp_path: Path, *extra: str, precision: str = "fp32"):  # type: ignore[no-untyped-def]
    args, overrides = parse(["squad", "--train-file", "t.json", "--output-dir", str(tmp_path), *extra])
    return training_arguments(run_config.from_args(args, overrides), SINGLE, precision)


def test_defaults_use_a_static_graph_bucket_views_and_fp32(tmp_path: Path) -> None:
    args = _args(tmp_path)
    assert args.ddp_static_graph is True
    assert args.ddp_find_unused_parameters is False
    assert args.ddp_gradient_as_bucket_view is True
    assert args.ddp_grad_comm == "fp32"
    assert args.ddp_bucket_cap_mb is None  # DDP's 25 MB


def test_gradients_travel_in_bf16_when_the_run_trains_in_bf16(tmp_path: Path) -> None:
    assert _args(tmp_path, precision="bf16").ddp_grad_comm == "bf16"
    assert _args(tmp_path, "--grad-comm", "fp32", precision="bf16").ddp_grad_comm == "fp32"


def test_grad_comm_option_and_trainer_arguments_override_the_defaults(tmp_path: Path) -> None:
    args = _args(tmp_path, "--grad-comm", "bf16", "--ddp_static_graph", "false",
                 "--ddp_gradient_as_bucket_view", "false", "--ddp_bucket_cap_mb", "50")
    assert (args.ddp_grad_comm, args.ddp_static_graph, args.ddp_gradient_as_bucket_view) == ("bf16", False, False)
    assert args.ddp_bucket_cap_mb == 50


def test_unknown_grad_comm_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        _args(tmp_path, "--grad-comm", "fp8")


def test_tuned_handler_passes_bucket_view_to_ddp_and_keeps_the_trainer_settings() -> None:
    from accelerate.utils import DistributedDataParallelKwargs

    base = DistributedDataParallelKwargs(find_unused_parameters=False, bucket_cap_mb=50, static_graph=True)
    kwargs = tuned_ddp_handler(base, "bf16", bucket_view=True).to_kwargs()
    assert kwargs == {"bucket_cap_mb": 50, "static_graph": True, "gradient_as_bucket_view": True}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_bf16_hook_runs_on_gloo_and_rounds_gradients_to_bf16(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch
    import torch.distributed as dist

    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{_free_port()}", rank=0, world_size=1)
    try:
        torch.manual_seed(0)
        model = torch.nn.Linear(64, 8)
        reference = torch.nn.Linear(64, 8)
        reference.load_state_dict(model.state_dict())
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        ddp.register_comm_hook(state=None, hook=bf16_gloo_hook)
        x = torch.randn(16, 64) * 3
        ddp(x).pow(2).sum().backward()
        reference(x).pow(2).sum().backward()
        assert model.weight.grad.dtype == torch.float32
        expected = reference.weight.grad.to(torch.bfloat16).to(torch.float32)
        assert torch.equal(model.weight.grad, expected)
        assert not torch.equal(model.weight.grad, reference.weight.grad)
    finally:
        dist.destroy_process_group()
        os.environ.pop("MASTER_PORT", None)


@pytest.fixture
def one_rank_group(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    import torch.distributed as dist

    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{_free_port()}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()
    os.environ.pop("MASTER_PORT", None)


def test_exchange_clock_records_every_bucket_of_a_step_and_leaves_gradients_alone(one_rank_group: None) -> None:
    import torch

    from xeoncluster.node.diagnostics.exchange_clock import ExchangeClock
    from xeoncluster.node.startup.grad_exchange import PowerSgd, exchange_hook

    torch.manual_seed(0)
    model, reference = torch.nn.Linear(64, 8), torch.nn.Linear(64, 8)
    reference.load_state_dict(model.state_dict())
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    clock = ExchangeClock(bytes_per_element=4)
    state, hook = exchange_hook("fp32", PowerSgd())
    ddp.register_comm_hook(state=state, hook=clock.timed(hook))
    x = torch.randn(16, 64)
    for _ in range(2):
        ddp(x).pow(2).sum().backward()
        clock.close_step()
    reference(x).pow(2).sum().backward()
    assert len(clock.steps) == 2
    for buckets in clock.steps:
        assert sum(size for _, _, size in buckets) == 4 * (64 * 8 + 8)
        assert all(launched <= completed for launched, completed, _ in buckets)
    assert torch.equal(model.weight.grad, 2 * reference.weight.grad)  # two backward passes accumulated


def test_powersgd_compresses_from_its_start_step_on_gloo(one_rank_group: None) -> None:
    import torch

    from xeoncluster.node.startup.grad_exchange import PowerSgd, exchange_hook

    torch.manual_seed(0)
    model = torch.nn.Linear(256, 128, bias=False)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    state, hook = exchange_hook("powersgd", PowerSgd(rank=1, start_step=2))
    ddp.register_comm_hook(state=state, hook=hook)
    ranks = []
    for _ in range(3):
        model.zero_grad()
        ddp(torch.randn(32, 256)).pow(2).sum().backward()
        ranks.append(int(torch.linalg.matrix_rank(model.weight.grad)))
    assert ranks[:2] == [32, 32]  # plain all-reduce before start_step: the batch's 32 samples
    assert ranks[2] == 1
