"""A training run in a child process (spawn): start it, poll its events, cancel it at once.

The parent side is torch-free: the window imports this without loading torch, and only the
child imports the loop. Cancelling asks the child to stop at its next step and terminates it
after a short grace; checkpoints are written atomically, so the last complete one stays valid.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue as queue_module
import signal
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from vitviz.training.config import TrainConfig
from vitviz.training.events import Event, FinishedEvent
from vitviz.training.runs import (
    prepare_run_dir,
    read_metrics,
    remove_stray_temporaries,
    write_status,
)
from vitviz.training.validate import check_training_config

DEFAULT_GRACE_S = 0.5


def run_child(config: dict[str, Any], run_dir: str, events: Any, stop: Any) -> int:
    """The child's work: run the loop, send every event to ``events``; returns the exit code.

    Whatever goes wrong ends with a "failed" FinishedEvent (with the traceback) in the queue.
    """
    finished = False

    def put(event: Event) -> None:
        nonlocal finished
        events.put(event)
        finished = finished or event.kind == "finished"

    try:
        from vitviz.training.loop import run_training

        cfg = TrainConfig.from_dict(config)
        if cfg.threads is None:  # leave a core to the window that started the run
            cfg = cfg.replace(threads=max(1, (os.cpu_count() or 2) - 1))
        run_training(cfg, put, stop, run_dir=Path(run_dir))
    except BaseException as exc:  # noqa: BLE001 - whatever it was, the parent must hear of it
        if not finished:
            message = f"training failed: {exc!r}"
            events.put(FinishedEvent("failed", run_dir, 0, None, message, traceback.format_exc()))
        return 1
    return 0


def _child_main(config: dict[str, Any], run_dir: str, events: Any, stop: Any) -> None:
    """Entry point of the spawned process."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C in a terminal is the parent's to handle
    try:
        code = run_child(config, run_dir, events, stop)
    finally:
        events.close()
        events.join_thread()  # every event is in the pipe before the process ends
    # Checkpoints and status are already synced; skip the interpreter's slow torch teardown.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


class RunHandle:
    """A run in a child process. Poll it from any one thread (e.g. a GUI timer)."""

    def __init__(self, process: Any, events: Any, stop: Any, run_dir: Path) -> None:
        self._process = process
        self._events = events
        self._stop = stop
        self.run_dir = run_dir
        self._finished: FinishedEvent | None = None
        self._cancelled = False
        self._killed = False  # terminated: the queue may be torn, never read it again
        self._pending: list[Event] = []  # drained while cancelling, handed out by poll()
        self._got_finished = False  # a FinishedEvent came through the queue
        self._lock = threading.Lock()

    @property
    def pid(self) -> int | None:
        return self._process.pid

    @property
    def finished(self) -> FinishedEvent | None:
        """The run's last event once poll() has returned it, else None."""
        return self._finished

    def is_alive(self) -> bool:
        return self._process.is_alive()

    def _drain(self, timeout: float = 0.0) -> list[Event]:
        out: list[Event] = []
        if self._killed:
            return out
        deadline = time.monotonic() + timeout
        while True:
            try:
                left = deadline - time.monotonic()
                event = self._events.get(timeout=left) if left > 0 else self._events.get_nowait()
            except (queue_module.Empty, EOFError, OSError):
                return out
            out.append(event)
            if getattr(event, "kind", None) == "finished":
                self._got_finished = True
                return out

    def poll(self) -> list[Event]:
        """Events reported since the last poll, oldest first; never blocks for long.

        The last one is always a FinishedEvent: the run's own, or one made here when the child
        was cancelled or died without saying why.
        """
        with self._lock:
            if self._finished is not None:
                return []
            out, self._pending = self._pending, []
            if not self._got_finished:
                out += self._drain()
            if not self._got_finished and not self._process.is_alive():
                out += self._drain(timeout=0.2)  # events still in the pipe
                if not self._got_finished:
                    out.append(self._synthesized_end())
            if out and out[-1].kind == "finished":
                self._finished = out[-1]  # type: ignore[assignment]
            return out

    def _synthesized_end(self) -> FinishedEvent:
        """The end of a child that could not say it itself, from what its run folder holds."""
        metrics = read_metrics(self.run_dir)
        accs = [m["val_acc"] for m in metrics if isinstance(m.get("val_acc"), (int, float))]
        best = max(accs) if accs else None
        done = len(metrics)
        if self._cancelled:
            message = f"cancelled after {done} complete epoch{'s' if done != 1 else ''}"
            return FinishedEvent("cancelled", str(self.run_dir), done, best, message)
        message = f"the training process ended unexpectedly (exit code {self._process.exitcode})"
        write_status(self.run_dir, "failed", message=message)
        return FinishedEvent("failed", str(self.run_dir), done, best, message)

    def cancel(self, grace_s: float = DEFAULT_GRACE_S, wait: bool = True) -> None:
        """Stop the run now: ask the child to stop, terminate it if it is still running after
        ``grace_s``. ``wait=False`` returns at once and finishes the job in a thread."""
        self._cancelled = True
        self._stop.set()
        if wait:
            self._end_child(grace_s)
        else:
            threading.Thread(
                target=self._end_child, args=(grace_s,), daemon=True, name="vitviz-cancel-run"
            ).start()

    def _end_child(self, grace_s: float) -> None:
        deadline = time.monotonic() + grace_s
        while self._process.is_alive() and time.monotonic() < deadline:
            with self._lock:  # keep the pipe flowing so the child can exit cleanly
                if not self._got_finished:
                    self._pending += self._drain()
            self._process.join(0.02)
        with self._lock:  # never terminate while poll() is reading a message
            terminate = self._process.is_alive()
            if terminate:
                self._killed = True
                self._process.terminate()
        if terminate:
            self._process.join(2.0)
            if self._process.is_alive():
                self._process.kill()
                self._process.join(2.0)
            done = len(read_metrics(self.run_dir))
            message = f"cancelled after {done} complete epoch{'s' if done != 1 else ''}"
            write_status(self.run_dir, "cancelled", message=message, epochs_done=done)
        remove_stray_temporaries(self.run_dir)

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the child to end; True if it has."""
        self._process.join(timeout)
        return not self._process.is_alive()


def start_run(config: TrainConfig) -> RunHandle:
    """Check ``config``, create its run folder and start training in a spawned child process.

    Raises TrainingConfigError (nothing created) when the settings can't work.
    """
    check_training_config(config)
    run_dir = prepare_run_dir(config)
    cfg = config.replace(out_dir=str(run_dir))
    ctx = mp.get_context("spawn")
    events = ctx.Queue()
    stop = ctx.Event()
    process = ctx.Process(
        target=_child_main,
        args=(cfg.to_dict(), str(run_dir), events, stop),
        name=f"vitviz-train-{run_dir.name}",
        daemon=True,
    )
    try:
        process.start()
    except Exception as exc:
        write_status(run_dir, "failed", message=f"could not start the training process: {exc}")
        raise
    return RunHandle(process, events, stop, run_dir)
