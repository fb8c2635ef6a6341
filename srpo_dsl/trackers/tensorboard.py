"""TensorBoard: the scalars in OUT/tb (`tensorboard --logdir OUT/tb`), the default tracker. A resumed run
drops the events logged after its checkpoint (a killed run's tail)."""

from __future__ import annotations

from collections.abc import Mapping

from srpo_dsl.trackers.base import TrackedRun, Tracker

FOLDER = "tb"  # OUT/tb


class TensorBoard(Tracker):
    keeps_files = False

    def __init__(self, run: TrackedRun):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(str(run.out / FOLDER), purge_step=run.start + 1 if run.start else 0)

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        for key, value in metrics.items():
            self.writer.add_scalar(key, value, step)
        self.writer.flush()

    def finish(self, failed: bool) -> None:
        self.writer.close()
