"""Shared training loop: device choice, seeding, validation with early stopping, and resumable checkpoints.

The promise of :func:`train` is that a run killed at any point and started again with the same arguments
ends with the same weights, bit for bit on CPU, as a run never interrupted. A checkpoint therefore holds
every random stream the steps draw from (the method's ``np.random.Generator``, torch's CPU and CUDA
generators, python ``random`` and numpy's legacy global state) next to the model and optimizer, and it
is written after validation so that nothing happens between the state it records and the next step.
Checkpoints are written by wall time (``checkpoint_seconds``), every ``checkpoint_every`` steps, or both,
and at the end; when they are written never changes what the run computes.

On a GPU the loop keeps the device busy: a step never waits for the device. Its scalars stay tensors
until a log or validation step reads them, and a non-finite loss is caught by a flag kept on the device
and checked there (:class:`NonFiniteLoss`), not by reading every loss back.

Checkpoint file: ``<checkpoint_dir>/checkpoint.pt`` (only the latest is kept), a ``torch.save`` dict
whose keys are listed in :func:`_checkpoint`.
"""

from __future__ import annotations

import contextlib
import copy
import datetime
import logging
import math
import os
import random
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

CHECKPOINT_NAME = "checkpoint.pt"
_TEMP_PREFIX = f".{CHECKPOINT_NAME}."
_TEMP_SUFFIX = ".tmp"
# the best weights stay on the GPU when it keeps this much free beside them (else they go to host memory)
_DEVICE_HEADROOM = 2.0
_clock = time.monotonic  # wall time of checkpoints (tests replace it)


class NonFiniteLoss(FloatingPointError):
    """A training loss became NaN or infinite: the run stops here instead of training on garbage."""


def select_device(preference: str = "auto") -> torch.device:
    """``auto`` → cuda when visible, else cpu; asking for ``cuda`` without one fails now, not hours later."""
    if preference == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if preference == "cpu":
        return torch.device("cpu")
    if preference.startswith("cuda"):
        if not torch.cuda.is_available():
            visible = os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>")
            raise RuntimeError(
                f"this job asked for a GPU but torch sees no CUDA device (CUDA_VISIBLE_DEVICES={visible})"
            )
        return torch.device(preference)
    raise ValueError(f"device must be 'auto', 'cpu' or 'cuda', got {preference!r}")


def seed_everything(seed: int) -> None:
    """Seed every global generator and make torch pick deterministic kernels."""
    # cuBLAS is only deterministic with a fixed workspace, and reads this before its first use.
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # seeds the CUDA generators too
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False


def autocast(device: torch.device):
    """bf16 mixed precision on CUDA; a no-op on CPU, where it would only cost time and exactness."""
    if device.type == "cuda":
        return torch.autocast(device_type="cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def to_device(array: np.ndarray, device: torch.device) -> torch.Tensor:
    """A host array on ``device``; to a GPU through pinned memory without blocking, so the host goes on
    drawing while the copy runs (the caching host allocator keeps the pinned buffer until the copy is done)."""
    tensor = torch.as_tensor(array)
    if device.type != "cuda":
        return tensor.to(device)
    return tensor.pin_memory().to(device, non_blocking=True)


def adamw(params, device: torch.device, **settings) -> torch.optim.AdamW:
    """AdamW; on CUDA its fused kernel (one launch for all parameters instead of several per tensor).

    The CPU keeps the default implementation: the release's CPU scores are bit for bit those of its arithmetic.
    """
    return torch.optim.AdamW(params, **settings, **({"fused": True} if device.type == "cuda" else {}))


@dataclass
class TrainingResult:
    steps_run: int  # steps completed in total, those before a resume included
    best_step: int | None  # step of the best validation value; None without validation
    best_value: float | None
    stopped_early: bool
    resumed_from: int | None  # step of the checkpoint this call resumed from; None for a fresh run
    history: list[dict]  # one {"step", <step_fn scalars>, "val"} per logged or validated step


def _random_states() -> dict:
    return {
        "torch_rng": torch.get_rng_state(),
        "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
        "python_random": random.getstate(),
        # as plain lists and numbers: torch.load(weights_only=True) refuses numpy arrays
        "numpy_global": [value.tolist() if isinstance(value, np.ndarray) else value for value in np.random.get_state()],
    }


def _restore_random_states(saved: dict, rng: np.random.Generator) -> None:
    rng.bit_generator.state = saved["rng"]
    torch.set_rng_state(saved["torch_rng"])
    if saved["cuda_rng"] is not None and torch.cuda.is_available():
        if len(saved["cuda_rng"]) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(saved["cuda_rng"])
        else:  # other hardware than the first attempt: the run goes on, but is no longer bit-identical
            logging.getLogger(__name__).warning(
                "checkpoint holds CUDA RNG states of %d devices, this job sees %d; not restoring them",
                len(saved["cuda_rng"]),
                torch.cuda.device_count(),
            )
    random.setstate(saved["python_random"])
    name, keys, *position = saved["numpy_global"]
    np.random.set_state((name, np.array(keys, dtype=np.uint32), *position))


def _device_has_room(state_dict: dict) -> bool:
    """True on a GPU with free memory for ``_DEVICE_HEADROOM`` × the weights beside them."""
    tensors = list(state_dict.values())
    if not tensors or tensors[0].device.type != "cuda":
        return False
    size = sum(tensor.numel() * tensor.element_size() for tensor in tensors)
    return torch.cuda.mem_get_info(tensors[0].device)[0] > _DEVICE_HEADROOM * size


def _keep_best(state_dict: dict, kept: dict | None) -> dict:
    """A detached copy of the weights: into the buffers of the last best copy where they fit, so a GPU run
    copies device to device at each improvement instead of reading ≈ its weights back to the host; the
    first copy goes to the GPU where it has room, else to the host."""
    if (
        kept is not None
        and kept.keys() == state_dict.keys()
        and all(
            kept[name].shape == tensor.shape and kept[name].dtype == tensor.dtype and kept[name].device == tensor.device
            for name, tensor in state_dict.items()
        )
    ):
        for name, tensor in state_dict.items():
            kept[name].copy_(tensor.detach())
        return kept
    device = None if _device_has_room(state_dict) else "cpu"
    return {name: tensor.detach().to(device or tensor.device, copy=True) for name, tensor in state_dict.items()}


def _write_atomically(payload: dict, path: Path) -> None:
    """Write to a temp file beside ``path`` and rename it over: a kill mid-write leaves the old file whole."""
    fd, temp_name = tempfile.mkstemp(dir=path.parent, prefix=_TEMP_PREFIX, suffix=_TEMP_SUFFIX)
    try:
        with os.fdopen(fd, "wb") as handle:
            torch.save(payload, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp_name, path)
    except BaseException:
        os.unlink(temp_name)
        raise


def _remove_stale_temp_files(directory: Path) -> None:
    """Temp files of a process killed while writing; never a valid checkpoint."""
    for stale in directory.glob(f"{_TEMP_PREFIX}*{_TEMP_SUFFIX}"):
        stale.unlink()


def _format_seconds(seconds: float) -> str:
    return str(datetime.timedelta(seconds=round(seconds)))


@dataclass
class _Progress:
    """What the loop carries from step to step, besides model, optimizer and random streams."""

    step: int = 0
    total_steps: int = 0
    finished: bool = False
    best_value: float | None = None
    best_step: int | None = None
    best_weights: dict | None = None
    bad_validations: int = 0
    stopped_early: bool = False
    last_val: float | None = None
    history: list[dict] = field(default_factory=list)

    def record_validation(self, value: float, model: torch.nn.Module, patience: int | None, min_delta: float) -> None:
        self.last_val = value
        # A NaN never improves. An improvement must beat the best by the fraction min_delta of its size:
        # a loss that creeps down by 1e-4 per epoch would otherwise never stop (sciLaMA's 500-epoch cap).
        if not math.isnan(value) and (
            self.best_value is None or value < self.best_value - min_delta * abs(self.best_value)
        ):
            self.best_value, self.best_step = value, self.step
            self.best_weights = _keep_best(model.state_dict(), self.best_weights)
            self.bad_validations = 0
        else:
            self.bad_validations += 1
            # Running out of patience at the last step is just the end of the run.
            self.stopped_early = (
                patience is not None and self.bad_validations >= patience and self.step < self.total_steps
            )


def _checkpoint(progress: _Progress, model, optimizer, rng: np.random.Generator) -> dict:
    return {
        "step": progress.step,
        "total_steps": progress.total_steps,
        "finished": progress.finished,
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "rng": rng.bit_generator.state,
        **_random_states(),
        "best_value": progress.best_value,
        "best_step": progress.best_step,
        "best_model": progress.best_weights,
        "bad_validations": progress.bad_validations,
        "stopped_early": progress.stopped_early,
        "last_val": progress.last_val,
        "history": progress.history,
    }


def _restore(saved: dict, model, optimizer, rng: np.random.Generator) -> _Progress:
    model.load_state_dict(saved["model"])
    optimizer.load_state_dict(saved["optimizer"])
    _restore_random_states(saved, rng)
    return _Progress(
        step=saved["step"],
        total_steps=saved["total_steps"],
        finished=saved["finished"],
        best_value=saved["best_value"],
        best_step=saved["best_step"],
        best_weights=saved["best_model"],
        bad_validations=saved["bad_validations"],
        stopped_early=saved["stopped_early"],
        last_val=saved["last_val"],
        history=saved["history"],
    )


def _resume(path: Path, total_steps: int, model, optimizer, rng: np.random.Generator, log) -> _Progress:
    # map_location: a checkpoint written on a GPU node must load on any node; load_state_dict moves it back.
    # weights_only: tensors, containers and numbers only — loading a checkpoint never runs code
    saved = torch.load(path, map_location="cpu", weights_only=True)
    if saved["total_steps"] != total_steps:
        raise ValueError(
            f"{path} belongs to a run of {saved['total_steps']} steps, this one asks for {total_steps}; "
            "delete it to start afresh"
        )
    if saved["finished"]:
        log.info("already finished at step %d/%d (checkpoint %s); no steps to run", saved["step"], total_steps, path)
    else:
        log.info("resuming from checkpoint at step %d/%d (%s)", saved["step"], total_steps, path)
    return _restore(saved, model, optimizer, rng)


class _LossWatch:
    """Whether every loss since the last check was finite, kept where the losses are: on a GPU, a flag on
    the device that only a check reads back, so that steps never wait for the device."""

    def __init__(self, first_step: int) -> None:
        self.finite: torch.Tensor | bool = True
        self.since = first_step  # the first step the flag covers

    def add(self, loss: torch.Tensor | float) -> None:
        if isinstance(loss, torch.Tensor):
            self.finite = torch.isfinite(loss.detach()) & self.finite
        else:
            self.finite = self.finite and math.isfinite(loss)

    def check(self, step: int) -> None:
        if not bool(self.finite):
            raise NonFiniteLoss(
                f"the training loss became NaN or infinite between steps {self.since} and {step}: the model "
                "diverged (a learning rate too high for these data, or inputs with NaN or infinite values)"
            )
        self.finite, self.since = True, step + 1


def _validate(model: torch.nn.Module, validate_fn: Callable[[], float]) -> float:
    model.eval()
    try:
        with torch.no_grad():
            return float(validate_fn())
    finally:
        model.train()  # the reference CellTreeQM code forgot this and trained on in eval mode


def train(
    *,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    step_fn: Callable[[int], dict[str, float]],
    total_steps: int,
    rng: np.random.Generator,
    checkpoint_dir: str | os.PathLike | None,
    checkpoint_every: int | None = 100,
    checkpoint_seconds: float | None = None,
    validate_fn: Callable[[], float] | None = None,
    validate_every: int = 50,
    patience: int | None = None,
    min_delta: float = 0.0,
    log: logging.Logger | None = None,
    log_every: int = 50,
) -> TrainingResult:
    """Run ``step_fn(step)`` for steps 1..total_steps, resuming from ``checkpoint_dir`` when it holds a checkpoint.

    ``step_fn`` does one optimisation step and returns scalars, at least ``{"loss": ...}``: floats or 0-d
    tensors, which are read only at log and validation steps (a GPU step then never waits for the device).
    Validation (lower is better) runs every ``validate_every`` steps and at the last one; with validation
    the model ends holding its best weights. ``patience`` stops after that many validations without
    improvement, an improvement being a drop of more than ``min_delta`` × |best value| (relative, so
    scale-free). A checkpoint is written every ``checkpoint_every`` steps and once ``checkpoint_seconds``
    have passed since the last one (None turns either off), and at the end. A NaN or infinite loss stops
    the run with :class:`NonFiniteLoss` at the next log or validation step.
    """
    if min(checkpoint_every or 1, validate_every, log_every) < 1:
        raise ValueError("checkpoint_every, validate_every and log_every must be at least 1")
    if checkpoint_seconds is not None and checkpoint_seconds < 0:
        raise ValueError(f"checkpoint_seconds must be 0 or more, got {checkpoint_seconds}")
    if patience is not None and validate_fn is None:
        raise ValueError("patience needs a validate_fn")
    log = log or logging.getLogger(__name__)

    checkpoint_path = None
    progress = _Progress(total_steps=total_steps)
    resumed_from = None
    if checkpoint_dir is not None:
        checkpoint_path = Path(checkpoint_dir) / CHECKPOINT_NAME
        checkpoint_path.parent.mkdir(parents=True, exist_ok=True)
        _remove_stale_temp_files(checkpoint_path.parent)
        if checkpoint_path.exists():
            progress = _resume(checkpoint_path, total_steps, model, optimizer, rng, log)
            resumed_from = progress.step

    last_saved = _clock()

    def save() -> None:
        nonlocal last_saved
        if checkpoint_path is not None:
            _write_atomically(_checkpoint(progress, model, optimizer, rng), checkpoint_path)
            last_saved = _clock()

    def checkpoint_due(step: int) -> bool:
        by_steps = checkpoint_every is not None and step % checkpoint_every == 0
        return by_steps or (checkpoint_seconds is not None and _clock() - last_saved >= checkpoint_seconds)

    start_step, started = progress.step, time.perf_counter()
    losses = _LossWatch(first_step=progress.step + 1)
    model.train()
    while not progress.stopped_early and progress.step < total_steps:  # so also when finished
        progress.step += 1
        step = progress.step
        step_scalars = step_fn(step)
        if "loss" not in step_scalars:
            raise KeyError(f"step_fn must return a 'loss', got {sorted(step_scalars)}")
        losses.add(step_scalars["loss"])

        validated = validate_fn is not None and (step % validate_every == 0 or step == total_steps)
        logged = step % log_every == 0
        read_back = logged or validated  # the only steps that read a value back from the device
        if read_back:
            losses.check(step)
            scalars = {name: float(value) for name, value in step_scalars.items()}
        if validated:
            progress.record_validation(_validate(model, validate_fn), model, patience, min_delta)
        if read_back:
            progress.history.append({"step": step, **scalars, "val": progress.last_val if validated else None})
        if logged:
            rate = (step - start_step) / max(time.perf_counter() - started, 1e-9)
            val = "" if progress.last_val is None else f" val {progress.last_val:.4f}"
            log.info(
                "step %d/%d (%d%%) loss %.4f%s | %.1f steps/s | eta %s",
                step,
                total_steps,
                100 * step // total_steps,
                scalars["loss"],
                val,
                rate,
                _format_seconds((total_steps - step) / rate),
            )

        # The final checkpoint follows the loop; saving here too would only cost time.
        if step < total_steps and not progress.stopped_early and checkpoint_due(step):
            losses.check(step)  # a checkpoint never holds weights trained on a NaN loss
            save()

    if not progress.finished:
        losses.check(progress.step)
        if progress.best_weights is not None:
            model.load_state_dict(progress.best_weights)
        progress.finished = True
        save()
        ending = "stopped early" if progress.stopped_early else "finished"
        best = (
            "" if progress.best_step is None else f"; best val {progress.best_value:.4f} at step {progress.best_step}"
        )
        log.info(
            "%s at step %d/%d after %s in this run%s",
            ending,
            progress.step,
            total_steps,
            _format_seconds(time.perf_counter() - started),
            best,
        )

    return TrainingResult(
        steps_run=progress.step,
        best_step=progress.best_step,
        best_value=progress.best_value,
        stopped_early=progress.stopped_early,
        resumed_from=resumed_from,
        history=copy.deepcopy(progress.history),
    )
