"""The TensorBoard tracker: every metrics line as scalars in the run's tb/ (tag = the field, step = `step`), each
step shown once across resumes (docs/trackers.md, "TensorBoard")."""

from __future__ import annotations

from typing import Any

from ablate.storage import fs
from ablate.track.base import TrackContext, numbers


class TensorBoardTracker:
    """Event files in <run>/tb/. An attempt opens its writer with TensorBoard's purge step at its resume point, so
    TensorBoard's reader drops what earlier attempts wrote from there on (the work this attempt redoes)."""

    name = "tensorboard"

    def __init__(self) -> None:
        self._writer: Any = None

    def start(self, ctx: TrackContext, resumed_from: int | None) -> None:
        from torch.utils.tensorboard import SummaryWriter

        folder = fs.check_no_links(ctx.run_dir / "tb", ctx.run_dir)
        fs.make_dirs(folder)
        self._writer = SummaryWriter(str(folder), purge_step=0 if resumed_from is None else resumed_from + 1)

    def log(self, record: dict[str, Any]) -> None:
        for key, value in numbers(record).items():
            self._writer.add_scalar(key, value, global_step=record["step"])
        self._writer.flush()

    def finish(self, state: str) -> None:
        self._writer.close()
