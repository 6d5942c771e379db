"""The shared training loop: seeding, devices, validation, early stopping and bit-identical resume."""

from __future__ import annotations

import dataclasses
import logging
import random
import re

import numpy as np
import pytest
import torch

from celldag import training
from celldag.training import CHECKPOINT_NAME, autocast, seed_everything, select_device, train

TOTAL = 23
EVERY = 5


@pytest.fixture(autouse=True)
def restore_determinism_flag():
    """seed_everything switches torch to deterministic kernels globally; leave other tests as they were."""
    before = torch.are_deterministic_algorithms_enabled()
    yield
    torch.use_deterministic_algorithms(before)


class Task:
    """A tiny regression with dropout whose steps draw from every random stream the loop must restore."""

    def __init__(self, seed: int, kill_at: int | None = None):
        seed_everything(seed)
        data = np.random.default_rng(123)  # fixed data, independent of the seed under test
        self.x = torch.tensor(data.standard_normal((64, 4)), dtype=torch.float32)
        self.y = self.x @ torch.tensor([[1.0], [-2.0], [0.5], [0.0]]) + 0.1
        self.x_val, self.y_val = self.x[:16] + 0.05, self.y[:16]
        self.model = torch.nn.Sequential(
            torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Dropout(0.3), torch.nn.Linear(16, 1)
        )
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=0.01)
        self.rng = np.random.default_rng(seed)
        self.kill_at = kill_at
        self.calls = 0

    def step(self, step: int) -> dict[str, float]:
        if step == self.kill_at:
            raise KeyboardInterrupt(f"simulated kill at step {step}")
        self.calls += 1
        batch = torch.from_numpy(self.rng.choice(64, size=8, replace=False))
        # Jitter from python random and numpy's legacy global state, so their restore is tested too.
        scale = 1.0 + 0.01 * random.random() + 0.01 * float(np.random.random())
        loss = scale * torch.nn.functional.mse_loss(self.model(self.x[batch]), self.y[batch])
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return {"loss": loss.item()}

    def validate(self) -> float:
        return torch.nn.functional.mse_loss(self.model(self.x_val), self.y_val).item()

    def train(self, checkpoint_dir, **kwargs) -> training.TrainingResult:
        kwargs = {"total_steps": TOTAL, "checkpoint_every": EVERY, "validate_every": 4, **kwargs}
        return train(
            model=self.model,
            optimizer=self.optimizer,
            step_fn=self.step,
            rng=self.rng,
            checkpoint_dir=checkpoint_dir,
            validate_fn=self.validate,
            **kwargs,
        )


def assert_same_weights(left: torch.nn.Module | dict, right: torch.nn.Module | dict) -> None:
    left = left.state_dict() if isinstance(left, torch.nn.Module) else left
    right = right.state_dict() if isinstance(right, torch.nn.Module) else right
    assert left.keys() == right.keys()
    for name in left:
        assert torch.equal(left[name], right[name]), name


def test_seed_everything_makes_training_repeatable_and_seeds_matter():
    def trained(seed: int) -> Task:
        task = Task(seed)  # built right before its run: dropout draws from the global torch generator
        task.train(None)
        return task

    first, second, other = trained(0), trained(0), trained(1)
    assert_same_weights(first.model, second.model)
    assert not torch.equal(first.model[0].weight, other.model[0].weight)
    assert torch.are_deterministic_algorithms_enabled()


def test_select_device_without_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(RuntimeError, match=r"asked for a GPU but torch sees no CUDA device \(CUDA_VISIBLE_DEVICES=\)"):
        select_device("cuda")
    assert select_device("auto") == torch.device("cpu")
    assert select_device("cpu") == torch.device("cpu")
    with pytest.raises(ValueError, match="tpu"):
        select_device("tpu")


def test_autocast_is_a_no_op_on_cpu():
    with autocast(torch.device("cpu")):
        product = torch.ones(2, 2) @ torch.ones(2, 2)
    assert product.dtype == torch.float32


def test_train_mode_restored_after_validation():
    task = Task(seed=0)
    seen = []

    def step(step: int) -> dict[str, float]:
        assert task.model.training, f"step {step} ran in eval mode"
        return task.step(step)

    def validate() -> float:
        seen.append((task.model.training, torch.is_grad_enabled()))
        return task.validate()

    train(
        model=task.model,
        optimizer=task.optimizer,
        step_fn=step,
        total_steps=10,
        rng=task.rng,
        checkpoint_dir=None,
        validate_fn=validate,
        validate_every=3,
    )
    assert seen == [(False, False)] * 4  # steps 3, 6, 9 and the last one


@pytest.mark.parametrize(("kill_at", "resumed_from"), [(3, None), (13, 10), (16, 15)])
def test_killed_run_resumes_bit_identically(tmp_path, kill_at, resumed_from):
    uninterrupted = Task(seed=7)
    expected = uninterrupted.train(tmp_path / "whole")
    global_states = (torch.get_rng_state(), random.getstate(), np.random.get_state()[1])

    killed = Task(seed=7, kill_at=kill_at)
    with pytest.raises(KeyboardInterrupt):
        killed.train(tmp_path / "killed")
    resumed = Task(seed=7)  # a fresh process: everything rebuilt and reseeded from scratch
    result = resumed.train(tmp_path / "killed")

    assert_same_weights(resumed.model, uninterrupted.model)
    assert_same_weights(resumed.optimizer.state_dict()["state"][0], uninterrupted.optimizer.state_dict()["state"][0])
    assert resumed.rng.bit_generator.state == uninterrupted.rng.bit_generator.state
    assert torch.equal(torch.get_rng_state(), global_states[0])
    assert random.getstate() == global_states[1]
    assert np.array_equal(np.random.get_state()[1], global_states[2])
    assert result.resumed_from == resumed_from
    assert resumed.calls == TOTAL - (resumed_from or 0)
    assert result.steps_run == expected.steps_run == TOTAL
    assert (result.best_step, result.best_value) == (expected.best_step, expected.best_value)
    assert result.history == expected.history
    assert not result.stopped_early


def test_rerun_after_finish_does_no_steps(tmp_path):
    first = Task(seed=3)
    expected = first.train(tmp_path)
    again = Task(seed=3)
    result = again.train(tmp_path)

    assert again.calls == 0
    assert result.resumed_from == TOTAL
    assert (result.steps_run, result.best_step, result.best_value) == (TOTAL, expected.best_step, expected.best_value)
    assert result.history == expected.history
    assert_same_weights(again.model, first.model)
    assert again.rng.bit_generator.state == first.rng.bit_generator.state


def test_checkpoint_of_another_length_is_refused(tmp_path):
    Task(seed=3).train(tmp_path)
    with pytest.raises(ValueError, match="delete it"):
        Task(seed=3).train(tmp_path, total_steps=TOTAL + 1)


def test_early_stopping_restores_best_weights(tmp_path):
    task = Task(seed=0)
    scripted = iter([5.0, 3.0, 4.0, 3.0, 6.0, 1.0])  # best at the 2nd validation, 3 misses after it
    weights_at = {}

    def validate() -> float:
        weights_at[len(weights_at) + 1] = {k: v.clone() for k, v in task.model.state_dict().items()}
        return next(scripted)

    result = train(
        model=task.model,
        optimizer=task.optimizer,
        step_fn=task.step,
        total_steps=100,
        rng=task.rng,
        checkpoint_dir=tmp_path,
        checkpoint_every=3,
        validate_fn=validate,
        validate_every=4,
        patience=3,
    )

    assert result.stopped_early
    assert (result.best_step, result.best_value) == (8, 3.0)
    assert result.steps_run == task.calls == 20
    assert [entry["val"] for entry in result.history] == [5.0, 3.0, 4.0, 3.0, 6.0]
    assert_same_weights(task.model, weights_at[2])
    assert not torch.equal(weights_at[2]["0.weight"], weights_at[5]["0.weight"])

    rerun = Task(seed=0)
    assert rerun.train(tmp_path, total_steps=100, patience=3) == dataclasses.replace(result, resumed_from=20)
    assert rerun.calls == 0
    assert_same_weights(rerun.model, weights_at[2])


def test_min_delta_ignores_creeping_improvements():
    task = Task(seed=0)
    scripted = iter([10.0, 9.95, 9.9, 9.0, 8.99, 8.98, 8.97, 1.0])  # drops < 1 % do not count
    result = train(
        model=task.model,
        optimizer=task.optimizer,
        step_fn=task.step,
        total_steps=100,
        rng=task.rng,
        checkpoint_dir=None,
        validate_fn=lambda: next(scripted),
        validate_every=1,
        patience=3,
        min_delta=0.01,
    )
    assert result.stopped_early
    assert (result.best_step, result.best_value) == (4, 9.0)  # 10 → 9.0 is the last drop of more than 1 %
    assert result.steps_run == 7


def test_failed_save_leaves_previous_checkpoint_intact(tmp_path, monkeypatch):
    task = Task(seed=0)
    real_save = torch.save

    def torn_save(obj, handle):
        handle.write(b"half a checkpoint")
        raise OSError("disk full")

    def step(step: int) -> dict[str, float]:
        if step == EVERY + 1:  # the checkpoint at EVERY is written; break the next one
            monkeypatch.setattr(torch, "save", torn_save)
        return task.step(step)

    with pytest.raises(OSError, match="disk full"):
        train(
            model=task.model,
            optimizer=task.optimizer,
            step_fn=step,
            total_steps=TOTAL,
            rng=task.rng,
            checkpoint_dir=tmp_path,
            checkpoint_every=EVERY,
        )

    assert [path.name for path in tmp_path.iterdir()] == [CHECKPOINT_NAME]
    monkeypatch.setattr(torch, "save", real_save)
    saved = torch.load(tmp_path / CHECKPOINT_NAME, weights_only=False)
    assert saved["step"] == EVERY and not saved["finished"]
    # A temp file left by a SIGKILL mid-write is cleared on the next start.
    (tmp_path / f".{CHECKPOINT_NAME}.abc.tmp").write_bytes(b"torn")
    result = Task(seed=0).train(tmp_path)
    assert result.resumed_from == EVERY
    assert [path.name for path in tmp_path.iterdir()] == [CHECKPOINT_NAME]


def test_progress_is_logged(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="celldag.training")
    with pytest.raises(KeyboardInterrupt):
        Task(seed=0, kill_at=12).train(tmp_path, total_steps=20, log_every=5)
    Task(seed=0).train(tmp_path, total_steps=20, log_every=5)

    messages = [record.getMessage() for record in caplog.records if record.name == "celldag.training"]
    progress = [m for m in messages if m.startswith("step ")]
    assert [m.split()[1] for m in progress] == ["5/20", "10/20", "15/20", "20/20"]
    pattern = r"step 15/20 \(75%\) loss \d+\.\d{4} val \d+\.\d{4} \| \d+\.\d steps/s \| eta \d+:\d\d:\d\d"
    assert re.fullmatch(pattern, progress[2])
    assert any(m.startswith("resuming from checkpoint at step 10/20") for m in messages)
    assert re.match(
        r"finished at step 20/20 after \d+:\d\d:\d\d in this run; best val \d+\.\d{4} at step \d+", messages[-1]
    )


class FakeClock:
    """Wall time that moves one second each time it is read: time-triggered checkpoints at known steps."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def kill_after_save(monkeypatch, nth: int) -> list[int]:
    """Let the ``nth`` checkpoint write land, then kill the run, as a SIGKILL right after it would."""
    real_write, steps = training._write_atomically, []

    def write_then_die(payload, path):
        real_write(payload, path)
        steps.append(payload["step"])
        if len(steps) == nth:
            raise KeyboardInterrupt(f"killed right after the checkpoint of step {payload['step']}")

    monkeypatch.setattr(training, "_write_atomically", write_then_die)
    return steps


def test_checkpoints_by_wall_time_resume_bit_identically(tmp_path, monkeypatch):
    monkeypatch.setattr(training, "_clock", FakeClock())
    uninterrupted = Task(seed=5)
    expected = uninterrupted.train(tmp_path / "whole", checkpoint_every=None, checkpoint_seconds=3)

    monkeypatch.setattr(training, "_clock", FakeClock())
    saved = kill_after_save(monkeypatch, nth=3)
    with pytest.raises(KeyboardInterrupt):
        Task(seed=5).train(tmp_path / "killed", checkpoint_every=None, checkpoint_seconds=3)
    # the clock is read once per step and once after each write: every 3 steps, none by count
    assert saved == [3, 6, 9]
    monkeypatch.undo()
    resumed = Task(seed=5)
    result = resumed.train(tmp_path / "killed", checkpoint_every=None, checkpoint_seconds=3)

    assert result.resumed_from == 9
    assert resumed.calls == TOTAL - 9
    assert_same_weights(resumed.model, uninterrupted.model)
    assert result.history == expected.history
    assert (result.best_step, result.best_value) == (expected.best_step, expected.best_value)


def test_no_checkpoint_but_the_last_when_both_triggers_are_off(tmp_path, monkeypatch):
    saved = kill_after_save(monkeypatch, nth=10**6)
    Task(seed=0).train(tmp_path, checkpoint_every=None, checkpoint_seconds=None)
    assert saved == [TOTAL]


def test_scalars_may_stay_tensors_until_a_log_step_reads_them():
    task = Task(seed=0)
    returned = []

    def step(step: int) -> dict:
        scalars = task.step(step)
        returned.append(torch.tensor(scalars["loss"]))
        return {"loss": returned[-1], "extra": torch.tensor(float(step))}

    result = train(
        model=task.model,
        optimizer=task.optimizer,
        step_fn=step,
        total_steps=10,
        rng=task.rng,
        checkpoint_dir=None,
        log_every=4,
    )
    assert result.history == [
        {"step": 4, "loss": float(returned[3]), "extra": 4.0, "val": None},
        {"step": 8, "loss": float(returned[7]), "extra": 8.0, "val": None},
    ]
    assert all(type(row[name]) is float for row in result.history for name in ("loss", "extra"))


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_non_finite_loss_stops_the_run_at_the_next_check_and_is_never_checkpointed(tmp_path, monkeypatch, bad):
    task = Task(seed=0)
    saved = kill_after_save(monkeypatch, nth=10**6)

    def step(step: int) -> dict:
        loss = task.step(step)["loss"]
        return {"loss": torch.tensor(bad if step == 7 else loss)}  # as a GPU step returns it: a tensor

    with pytest.raises(training.NonFiniteLoss, match="between steps 7 and 8: the model diverged"):
        train(
            model=task.model,
            optimizer=task.optimizer,
            step_fn=step,
            total_steps=TOTAL,
            rng=task.rng,
            checkpoint_dir=tmp_path,
            checkpoint_every=2,
            log_every=100,
            validate_fn=task.validate,
            validate_every=100,
        )
    assert saved == [2, 4, 6]  # the check before the checkpoint of step 8 stopped the run
    assert task.calls == 8


def test_a_non_finite_float_loss_is_caught_too():
    task = Task(seed=0)
    with pytest.raises(training.NonFiniteLoss, match="between steps 1 and 5"):
        train(
            model=task.model,
            optimizer=task.optimizer,
            step_fn=lambda step: {"loss": float("nan")},
            total_steps=TOTAL,
            rng=task.rng,
            checkpoint_dir=None,
            log_every=5,
        )


def test_best_weights_are_copied_into_the_buffers_of_the_last_best_copy():
    model = torch.nn.Linear(3, 2)
    first = training._keep_best(model.state_dict(), None)
    with torch.no_grad():
        model.weight.add_(1.0)
    second = training._keep_best(model.state_dict(), first)
    assert second is first
    assert_same_weights(second, model)
    assert second["weight"].data_ptr() != model.weight.data_ptr()  # a copy, not the live weights
    assert not training._device_has_room(model.state_dict())  # on the CPU the copy is the host copy
