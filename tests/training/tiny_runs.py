"""The tiny training run the loop's tests share: two epochs of two steps on random images (the
second step a part batch: 48 images in batches of 32), a 2-block ViT of width 32, stochastic
depth on, no probe, a step event every step, one thread. Each test changes what it needs with
``dataclasses.replace``."""

from __future__ import annotations

from vitviz.training import TrainConfig

TWO_BY_TWO = TrainConfig(
    dataset="random",
    train_size=48,
    val_size=16,
    batch_size=32,
    epochs=2,
    dim=32,
    depth=2,
    heads=2,
    drop_path_rate=0.2,
    probe=False,
    step_report_interval_s=0.0,
    threads=1,
)
