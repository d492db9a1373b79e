"""The training loop as a plain function: ``run_training(config, reporter, stop_flag)``.

It reports events to ``reporter`` (any callable, e.g. ``list.append`` or ``queue.put``) and
checks ``stop_flag`` (anything with ``is_set()``, e.g. threading.Event / multiprocessing.Event,
or a zero-argument callable) before every step. No threads or processes of its own: the window
runs it in a child process (vitviz.training.process), the CLI in its own process, tests directly.
"""

from __future__ import annotations

import math
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vitviz.checkpoints import save_checkpoint
from vitviz.core.devices import resolve_device
from vitviz.imaging import Preprocessing
from vitviz.pipeline.memory import available_memory
from vitviz.training.augment import CropFlip, CropFlipDraws, Normalizer, crop_flip_draws
from vitviz.training.compiled import CompiledOrEager, eager_module, wants_compile
from vitviz.training.config import TrainConfig, equivalent_command
from vitviz.training.datasets import DatasetError, TrainData, channel_stats, load_dataset
from vitviz.training.events import (
    CheckpointEvent,
    EpochEvent,
    Event,
    FinishedEvent,
    LogEvent,
    ProbeEvent,
    RunStarted,
    RunStatus,
    StepEvent,
)
from vitviz.training.models import build_model
from vitviz.training.optim import AmpSettings, amp_settings, make_optimizer
from vitviz.training.probe import probe_maps
from vitviz.training.runs import (
    BEST_CHECKPOINT,
    FIRST_CHECKPOINT,
    LAST_CHECKPOINT,
    PROBE_KEYS,
    append_metrics,
    append_steps,
    prepare_run_dir,
    write_probe,
    write_status,
)
from vitviz.training.schedule import lr_at
from vitviz.training.validate import check_training_config

Reporter = Callable[[Event], Any]


class StopFlag(Protocol):
    def is_set(self) -> bool: ...


@dataclass
class RunResult:
    run_dir: Path
    status: RunStatus
    epochs_done: int
    best_val_acc: float | None
    metrics: list[dict[str, Any]] = field(default_factory=list)


def _stop_requested(stop_flag: StopFlag | Callable[[], bool] | None) -> bool:
    if stop_flag is None:
        return False
    is_set = getattr(stop_flag, "is_set", None)
    return bool(is_set() if is_set is not None else stop_flag())  # type: ignore[operator]


def _no_report(event: Event) -> None:
    return None


def run_training(
    config: TrainConfig,
    reporter: Reporter | None = None,
    stop_flag: StopFlag | Callable[[], bool] | None = None,
    *,
    run_dir: Path | None = None,
) -> RunResult:
    """Train as ``config`` says, writing the run folder; returns how it ended.

    Settings that can't work raise TrainingConfigError before anything is created. ``run_dir``:
    an already prepared run folder (start_run prepares it in the parent process). A stop request
    ends the run at the next step with status "cancelled"; the last complete epoch's checkpoint
    stays. Data problems raise DatasetError, anything else its own error, after a "failed"
    FinishedEvent and status.
    """
    report = reporter or _no_report
    if run_dir is None:
        check_training_config(config)
        run_dir = prepare_run_dir(config)
    config = config.replace(out_dir=str(run_dir))
    try:
        return _Run(config, run_dir, report, stop_flag).run()
    except DatasetError as exc:
        _failed(run_dir, report, str(exc), "")
        raise
    except Exception as exc:
        _failed(run_dir, report, f"training failed: {exc}", traceback.format_exc())
        raise


def _failed(run_dir: Path, report: Reporter, message: str, details: str) -> None:
    write_status(run_dir, "failed", message=message)
    report(FinishedEvent("failed", str(run_dir), 0, None, message, details))


def fits_on_device(nbytes: int, device: torch.device) -> bool:
    """Whether a training set of ``nbytes`` may live on ``device`` for the whole run: always on
    the CPU (it is there already); elsewhere when it takes at most half the free memory (the
    rest is for the model, its activations and the optimizer), or when that is unknown."""
    if device.type == "cpu":
        return True
    free = available_memory(device)
    return free is None or nbytes <= free // 2


def evaluate(
    model: nn.Module,
    images: Tensor,
    labels: Tensor,
    normalize: Normalizer,
    batch_size: int,
    amp: AmpSettings,
    stop: Callable[[], bool] = lambda: False,
) -> tuple[float, float] | None:
    """Mean cross-entropy and accuracy over (N, C, S, S) uint8 images; None if stopped."""
    device = normalize.scale.device
    was_training = model.training
    model.eval()
    loss_sum = torch.zeros((), device=device)  # float32: MPS has no float64
    correct = torch.zeros((), device=device, dtype=torch.int64)
    try:
        with torch.inference_mode():
            for start in range(0, len(labels), batch_size):
                if stop():
                    return None
                x = normalize(images[start : start + batch_size].to(device, non_blocking=True))
                y = labels[start : start + batch_size].to(device, non_blocking=True)
                with amp.autocast():
                    logits = model(x)
                loss_sum += F.cross_entropy(logits.float(), y, reduction="sum")
                correct += (logits.argmax(dim=-1) == y).sum()
    finally:
        model.train(was_training)
    n = max(len(labels), 1)
    return float(loss_sum) / n, int(correct) / n


class _Run:
    """One run's state; ``run()`` is the loop. Private: the function above is the API."""

    def __init__(
        self,
        cfg: TrainConfig,
        run_dir: Path,
        report: Reporter,
        stop_flag: StopFlag | Callable[[], bool] | None,
    ) -> None:
        self.cfg, self.run_dir, self.report = cfg, run_dir, report
        self.stop = lambda: _stop_requested(stop_flag)
        self.metrics: list[dict[str, Any]] = []
        self.best_acc: float | None = None

    # -- set-up ----------------------------------------------------------------------------------
    def _setup(self) -> None:
        cfg = self.cfg
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        self.device = resolve_device(cfg.device)
        self.data: TrainData = load_dataset(cfg)
        for note in self.data.notes[:20]:
            self.report(LogEvent(note))
        mean, std = channel_stats(self.data.train_images)
        channels = self.data.train_images.shape[1]  # 1 for grayscale data, else 3
        self.prep = Preprocessing(
            image_size=cfg.image_size,
            resize=self.data.resize,
            mean=mean,
            std=std,
            interpolation="bicubic",
            channels=channels,
        )
        torch.manual_seed(cfg.seed)
        model = build_model(cfg, len(self.data.class_names), channels)
        self.model = model.to(self.device).train()
        self.optimizer = make_optimizer(self.model, cfg.lr, cfg.weight_decay, self.device)
        self.amp = amp_settings(cfg.amp, self.device)
        self.normalize = Normalizer(mean, std, self.device)
        self.shuffle_gen = torch.Generator().manual_seed(cfg.seed)
        self.aug_gen = torch.Generator(device=self.device).manual_seed(cfg.seed + 1)
        n = len(self.data.train_labels)
        self.steps_per_epoch = math.ceil(n / cfg.batch_size)
        self.total_steps = self.steps_per_epoch * cfg.epochs
        self.warmup_steps = min(self.total_steps, round(cfg.warmup_epochs * self.steps_per_epoch))
        self.val_x = self.data.val_images.to(self.device)
        self.val_y = self.data.val_labels.to(self.device)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.crop_flips: dict[tuple[int, ...], CropFlip] = {}
        self.resident: tuple[Tensor, Tensor, Tensor] | None = None  # host images, device copy
        self.told_host_memory = False
        self.forward_loss = CompiledOrEager(
            self._forward_loss,
            wants_compile(cfg.compile, self.device),
            lambda message: self.report(LogEvent(message)),
            device=self.device,
        )
        if self.forward_loss.active:
            self.report(
                LogEvent(
                    f"training step compiled with torch.compile on {self.device}: the first "
                    "steps wait for the compiler (compile off in More settings, or --compile off)"
                )
            )

    # -- one optimizer step ------------------------------------------------------------------------
    def _forward_loss(
        self, x: Tensor, y: Tensor, draws: CropFlipDraws | None, crop_flip: CropFlip | None
    ) -> tuple[Tensor, Tensor]:
        """What torch.compile compiles: crop/flip gather, normalisation, forward pass, loss.
        x (B, C, S, S) uint8, y (B,); returns the loss (scalar) and the correct count."""
        if draws is not None and crop_flip is not None:
            x = crop_flip(x, draws)
        with self.amp.autocast():
            logits = self.model(self.normalize(x))  # (B, classes)
            loss = F.cross_entropy(logits.float(), y, label_smoothing=self.cfg.label_smoothing)
        return loss, (logits.detach().argmax(dim=-1) == y).sum()

    def _crop_flip(self, x: Tensor) -> CropFlip:
        """The gather for batches shaped like ``x`` (made once per shape: full and last)."""
        key = tuple(x.shape)
        if key not in self.crop_flips:
            B, C, H, W = key
            self.crop_flips[key] = CropFlip(B, C, H, W, self.cfg.effective_crop_padding, x.device)
        return self.crop_flips[key]

    def _step(self, x: Tensor, y: Tensor, step: int) -> tuple[Tensor, Tensor]:
        """Augment, forward, backward, update: x (B, C, S, S) uint8 on the device, y (B,).
        Returns the loss (scalar tensor) and the number of correct predictions (no sync)."""
        cfg = self.cfg
        draws, crop_flip = None, None
        if cfg.augment:  # drawn here, outside any compiled code, from the seeded generator
            draws = crop_flip_draws(
                len(x), cfg.effective_crop_padding, True, self.aug_gen, x.device
            )
            crop_flip = self._crop_flip(x)
        lr = lr_at(step, cfg.lr, self.total_steps, self.warmup_steps, cfg.min_lr)
        for group in self.optimizer.param_groups:
            group["lr"] = lr

        def forward_backward(fn: Callable[..., tuple[Tensor, Tensor]]) -> tuple[Tensor, Tensor]:
            self.optimizer.zero_grad(set_to_none=True)
            loss, right = fn(x, y, draws, crop_flip)
            self.amp.backward(loss)
            return loss.detach(), right

        loss, right = self.forward_loss.run(forward_backward)
        self.amp.step(self.optimizer, self.params, cfg.grad_clip)
        return loss, right

    # -- the loop ---------------------------------------------------------------------------------
    def run(self) -> RunResult:
        threads = torch.get_num_threads()
        try:
            return self._run()
        finally:
            torch.set_num_threads(threads)  # cfg.threads is for this run only

    def _run(self) -> RunResult:
        self._setup()
        cfg = self.cfg
        params = sum(p.numel() for p in self.model.parameters())
        self.report(
            RunStarted(
                str(self.run_dir),
                cfg.epochs,
                self.steps_per_epoch,
                self.total_steps,
                list(self.data.class_names),
                len(self.data.train_labels),
                len(self.data.val_labels),
                str(self.device),
                params,
            )
        )
        self.t_start = time.perf_counter()
        status: RunStatus = "completed"
        for epoch in range(1, cfg.epochs + 1):
            if not self._epoch(epoch):
                status = "cancelled"
                break
        done = len(self.metrics)
        best = self.best_acc
        if status == "completed":
            message = f"{done} epochs, best validation accuracy {best:.1%}"
        else:
            message = f"cancelled after {done} complete epoch{'s' if done != 1 else ''}"
        write_status(self.run_dir, status, epochs_done=done, best_val_acc=best, message=message)
        self.report(FinishedEvent(status, str(self.run_dir), done, best, message))
        return RunResult(self.run_dir, status, done, best, list(self.metrics))

    def _eta(self, steps_done: int) -> float:
        elapsed = time.perf_counter() - self.t_start
        return elapsed / max(steps_done, 1) * (self.total_steps - steps_done)

    def _train_tensors(self, epoch: int) -> tuple[Tensor, Tensor, bool]:
        """The epoch's training images and labels, and whether they are on the device.

        A set used again (not regenerated) is copied to the device once, not every epoch; one
        that does not fit stays in host memory and goes over a batch at a time.
        """
        images, labels = self.data.train_set(epoch)
        if self.resident is not None and self.resident[0] is images:
            return self.resident[1], self.resident[2], True
        self.resident = None  # a regenerated set replaces the last one
        dev = self.device
        need = images.nbytes + labels.nbytes
        if not fits_on_device(need, dev):
            if not self.told_host_memory:
                self.told_host_memory = True
                self.report(
                    LogEvent(
                        f"the training set ({need / 2**20:,.0f} MiB) stays in host memory, "
                        f"too big for {dev}'s free memory; batches are copied one by one"
                    )
                )
            return images, labels, False
        on_dev = images.to(dev), labels.to(dev)  # the same tensors on the CPU
        self.resident = (images, *on_dev)
        return on_dev[0], on_dev[1], True

    def _epoch(self, epoch: int) -> bool:
        """Train one epoch, validate, checkpoint, report; False if stopped part-way."""
        cfg, dev = self.cfg, self.device
        if self.stop():
            return False
        images, labels, on_device = self._train_tensors(epoch)
        order = torch.randperm(len(labels), generator=self.shuffle_gen)
        order = order.to(dev) if on_device else order  # index where the images are
        loss_sum = torch.zeros((), device=dev)
        correct = torch.zeros((), device=dev, dtype=torch.int64)
        window_loss = torch.zeros((), device=dev)
        window_steps, window_images = 0, 0
        t_epoch = t_window = time.perf_counter()
        base = (epoch - 1) * self.steps_per_epoch
        for i in range(self.steps_per_epoch):
            if self.stop():
                return False
            idx = order[i * cfg.batch_size : (i + 1) * cfg.batch_size]
            x, y = images[idx], labels[idx]
            if not on_device:
                x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
            loss, right = self._step(x, y, base + i)
            loss_sum += loss
            window_loss += loss
            correct += right
            window_steps += 1
            window_images += len(idx)
            now = time.perf_counter()
            last = i == self.steps_per_epoch - 1
            if last or now - t_window >= cfg.step_report_interval_s:
                mean_loss = float(window_loss) / window_steps  # syncs the device
                now = time.perf_counter()
                step = base + i + 1
                self.report(
                    StepEvent(
                        epoch,
                        step,
                        self.total_steps,
                        mean_loss,
                        lr_at(base + i, cfg.lr, self.total_steps, self.warmup_steps, cfg.min_lr),
                        window_images / max(now - t_window, 1e-9),
                        now - self.t_start,
                        self._eta(step),
                    )
                )
                per_epoch = self.steps_per_epoch
                row = dict(epoch=epoch, step=step, steps_per_epoch=per_epoch, loss=mean_loss)
                append_steps(self.run_dir, row)
                window_loss.zero_()
                window_steps, window_images, t_window = 0, 0, now
        train_time = time.perf_counter() - t_epoch
        evaluated = evaluate(
            self.model,
            self.val_x,
            self.val_y,
            self.normalize,
            max(2 * cfg.batch_size, 256),
            self.amp,
            self.stop,
        )
        if evaluated is None:
            return False
        self._finish_epoch(
            epoch,
            float(loss_sum) / self.steps_per_epoch,
            int(correct) / len(labels),
            evaluated,
            len(labels) / train_time,
            time.perf_counter() - t_epoch,
        )
        return True

    def _finish_epoch(
        self,
        epoch: int,
        train_loss: float,
        train_acc: float,
        evaluated: tuple[float, float],
        images_per_s: float,
        epoch_time: float,
    ) -> None:
        cfg = self.cfg
        val_loss, val_acc = evaluated
        is_best = self.best_acc is None or val_acc > self.best_acc
        if is_best:
            self.best_acc = val_acc
        step = epoch * self.steps_per_epoch
        row = dict(
            epoch=epoch,
            step=step,
            train_loss=train_loss,
            train_acc=train_acc,
            val_loss=val_loss,
            val_acc=val_acc,
            lr=lr_at(step - 1, cfg.lr, self.total_steps, self.warmup_steps, cfg.min_lr),
            images_per_s=images_per_s,
            epoch_time_s=epoch_time,
            elapsed_s=time.perf_counter() - self.t_start,
        )
        provenance = dict(
            trained_by="vitviz.training",
            command=cfg.command or equivalent_command(cfg),
            dataset=self.data.description,
            train_config=cfg.to_dict(),
            epoch=epoch,
            epochs=cfg.epochs,
            metrics=row,
            best_val_acc=self.best_acc,
            device=str(self.device),
        )
        last = self._save(self.run_dir / LAST_CHECKPOINT, provenance)
        if is_best:
            best = self._save(self.run_dir / BEST_CHECKPOINT, provenance)
        if epoch == 1:  # kept for "compare epoch 1 with best" (DESIGN §5)
            self._save(self.run_dir / FIRST_CHECKPOINT, provenance)
        append_metrics(self.run_dir, row)
        self.metrics.append(row)
        self.report(
            EpochEvent(
                epoch,
                cfg.epochs,
                train_loss,
                train_acc,
                val_loss,
                val_acc,
                images_per_s,
                epoch_time,
                self._eta(step),
                is_best,
            )
        )
        self.report(CheckpointEvent(epoch, str(last), False))
        if is_best:
            self.report(CheckpointEvent(epoch, str(best), True))
        if cfg.probe:
            self._probe(epoch)

    def _save(self, path: Path, provenance: dict[str, Any]) -> Path:
        model = eager_module(self.model)  # no "_orig_mod." in the keys
        return save_checkpoint(model, path, self.data.class_names, self.prep, provenance)

    def _probe(self, epoch: int) -> None:
        x = self.normalize(self.val_x[:1])  # (1, C, S, S)
        rollout, cls_map, predicted = probe_maps(self.cfg.side, self.model, x)
        masks = self.data.val_masks
        image = self.data.val_images[0]  # (C, S, S); shown as RGB (gray repeated for C = 1)
        event = ProbeEvent(
            epoch,
            image.expand(3, -1, -1).permute(1, 2, 0).contiguous().numpy(),
            rollout,
            cls_map,
            int(self.data.val_labels[0]),
            predicted,
            None if masks is None else masks[0].numpy().copy(),
        )
        write_probe(self.run_dir, epoch, {k: getattr(event, k) for k in PROBE_KEYS})
        self.report(event)
