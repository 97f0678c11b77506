"""The distributed executor's pieces that need no second process: shares, backend and device
choice, digests, moving updates between devices, and `fedcore run --nproc` refusing bad setups.
Real multi-process runs: tests/engine/test_distributed_runs.py."""

from __future__ import annotations

import pytest
import torch

from fedcore import cli
from fedcore.cli.run import run_callbacks
from fedcore.engine.callbacks import Callback, EarlyStopping
from fedcore.engine.checkpoint import to_device
from fedcore.engine.distributed import (
    from_main,
    init_distributed,
    launched_world,
    main_first,
    params_digest,
    pick_backend,
    rank_device,
    shard,
    torchrun_argv,
)
from fedcore.engine.types import ClientUpdate
from fedcore.errors import ConfigError
from fedcore.registries import load_config
from fedcore.reporting.progress import ProgressCallback

CONFIG = "configs/quickstart.yaml"
CPU, CUDA = torch.device("cpu"), torch.device("cuda")


def test_shares_go_longest_first_to_the_least_loaded_rank():
    # 5 -> r0 (5); 3 -> r1 (3); 3 -> r1 (6); 1 -> r0 (6)
    assert shard([5, 3, 3, 1], 2) == [[0, 3], [1, 2]]
    # equal costs: round robin in position order
    assert shard([1, 1, 1], 2) == [[0, 2], [1]]
    # more ranks than tasks: the extra ranks train nothing this round
    assert shard([2, 7], 3) == [[1], [0], []]
    assert shard([], 2) == [[], []]


def test_every_task_lands_on_exactly_one_rank():
    costs = [17, 3, 99, 3, 42, 8, 8, 1]
    shares = shard(costs, 3)
    assert sorted(i for s in shares for i in s) == list(range(len(costs)))
    assert shard(costs, 3) == shares  # deterministic


def test_backend_follows_the_device_and_refuses_misfits():
    assert pick_backend(CPU) == "gloo"
    assert pick_backend(CUDA) == "nccl"
    assert pick_backend(CUDA, "gloo") == "gloo"
    with pytest.raises(ConfigError, match="nccl needs train.device=cuda"):
        pick_backend(CPU, "nccl")
    with pytest.raises(ConfigError, match="use gloo or nccl"):
        pick_backend(CPU, "mpi")


def test_each_rank_gets_its_own_gpu_or_a_one_line_refusal():
    assert rank_device(CPU, 5, 0) == CPU
    assert rank_device(CUDA, 1, 2) == torch.device("cuda", 1)
    with pytest.raises(ConfigError, match="only 2 GPU"):
        rank_device(CUDA, 2, 2)


def test_world_size_comes_from_torchrun_env(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert launched_world() == 1
    assert init_distributed(CPU) is None  # a plain one-process run joins no group
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert launched_world() == 4
    monkeypatch.setenv("WORLD_SIZE", "four")
    with pytest.raises(ConfigError, match="WORLD_SIZE"):
        launched_world()


def test_without_ranks_the_helpers_just_call():
    assert main_first(None, lambda: 3) == 3
    assert from_main(None, lambda: "x") == "x"


def test_digest_sees_one_changed_value():
    p = {"w": torch.arange(6.0).view(2, 3), "n": torch.tensor(4)}
    q = {k: v.clone() for k, v in p.items()}
    assert params_digest(p) == params_digest(q)
    q["w"][1, 2] = 5.000001
    assert params_digest(p) != params_digest(q)
    assert params_digest({"a": p["w"]}) != params_digest({"b": p["w"]})  # keys count too


def test_updates_move_between_devices_whole():
    up = ClientUpdate(cid=3, num_examples=7, params={"w": torch.ones(2)}, uploads={"loss": [torch.zeros(1), 1.5]},
                      metrics={"train/loss": 0.5}, state={"labels": torch.tensor([1, 0])})
    moved = to_device(up, torch.device("meta"))
    assert isinstance(moved, ClientUpdate) and (moved.cid, moved.num_examples, moved.metrics) == (3, 7, up.metrics)
    assert moved.params["w"].is_meta and moved.uploads["loss"][0].is_meta and moved.state["labels"].is_meta
    assert moved.uploads["loss"][1] == 1.5 and up.params["w"].device == CPU  # the original is untouched


def test_other_ranks_keep_callback_positions_without_progress_or_tracking():
    cfg = load_config(CONFIG, ["train.early_stop_patience=3", "data.validation.fraction=0.1"])
    main, other = run_callbacks(cfg, 5, progress=True), run_callbacks(cfg, 5, progress=True, main=False)
    assert [type(c) for c in main] == [ProgressCallback, EarlyStopping]
    assert [type(c) for c in other] == [Callback, EarlyStopping]


def test_torchrun_command():
    argv = torchrun_argv(3, "fedcore", ["run", "c.yaml"])
    assert argv[1:] == ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node=3", "-m", "fedcore",
                        "run", "c.yaml"]


def _fails(argv, capsys, code=2) -> str:
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert exc.value.code == code
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and "Traceback" not in err
    return err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without GPUs")
def test_nproc_on_cuda_without_gpus_is_refused(tmp_path, capsys):
    err = _fails(["run", CONFIG, "--out", str(tmp_path / "r"), "--nproc", "2", "-s", "train.device=cuda"], capsys)
    assert "no CUDA GPU is visible" in err and not (tmp_path / "r").exists()


def test_nproc_inside_torchrun_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    err = _fails(["run", CONFIG, "--out", str(tmp_path / "r"), "--nproc", "2"], capsys)
    assert "leave --nproc out" in err


def test_nproc_zero_is_a_usage_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["run", CONFIG, "--out", str(tmp_path / "r"), "--nproc", "0"])
    assert exc.value.code == 2


@pytest.mark.parametrize("checkpointed", [True, False])
def test_a_failed_rank_ends_the_launch_with_one_line(tmp_path, capsys, monkeypatch, checkpointed):
    out = tmp_path / "r"
    seen = {}

    def fake_launch(nproc, module, args):  # the ranks ran, rank 0 checkpointed (or not), one died
        seen.update(nproc=nproc, module=module, args=args)
        if checkpointed:
            (out / "checkpoints").mkdir(parents=True)
            (out / "checkpoints" / "latest.pt").write_bytes(b"")
        return 1

    monkeypatch.setattr("fedcore.engine.distributed.launch", fake_launch)
    argv = ["run", CONFIG, "--out", str(out), "--nproc", "3", "-s", "train.rounds=2", "--no-progress"]
    err = _fails(argv, capsys, code=1)
    assert "3-process run failed (torchrun exit code 1" in err
    assert (f"--resume {out}" in err) is checkpointed and ("wrote no checkpoint" in err) is not checkpointed
    # every rank gets the run's own options again (and the resolved --out), never --nproc
    assert seen["nproc"] == 3 and seen["module"] == "fedcore"
    assert seen["args"][:4] == ["run", CONFIG, "--out", str(out)] and "--nproc" not in seen["args"]
    assert ["--set", "train.rounds=2"] == seen["args"][4:6] and seen["args"][-1] == "--no-progress"


def test_nproc_checks_the_checkpoint_to_resume_before_starting_ranks(tmp_path, capsys, monkeypatch):
    out = tmp_path / "r"
    (out / "checkpoints").mkdir(parents=True)
    (out / "checkpoints" / "latest.pt").write_bytes(b"not a checkpoint")
    monkeypatch.setattr("fedcore.engine.distributed.launch", lambda *a: pytest.fail("ranks started"))
    err = _fails(["run", CONFIG, "--resume", str(out), "--nproc", "2"], capsys)
    assert "cannot be read" in err
