"""The Weights & Biases tracker: one W&B run per ablate run (id = the run id, group = the sweep, job_type = the arm,
name = the label, tags: `tags`), continued across resumes with each step logged once (docs/trackers.md, "W&B")."""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Any

from ablate.storage import fs, store
from ablate.track.base import TrackContext, numbers, warn

INIT_TIMEOUT_S = 30.0
"""How long `wandb.init` may try to reach the server (W&B's own default: 90 s) unless $WANDB_INIT_TIMEOUT says: a
server that does not answer costs this at most, and W&B is dropped with its own error (a run shorter than this is
left behind by the fan-out's wait at its end, ablate.track.fanout.CLOSE_WAIT_S)."""

FINISH_TIMEOUT_S = 6.0
"""W&B's `finish_timeout`: how long `run.finish()` (and W&B's own atexit teardown, which finishes a run left open)
waits for the upload; W&B's default waits for all of it. Less than the fan-out's wait at the end of a run, so a slow
server never holds the process at exit; what was not uploaded then is in metrics.jsonl."""

STATE_FILE = Path("track") / "wandb.json"
"""Under the run directory: the id of the W&B run this directory opened, so that later attempts reopen that one."""

NO_CREDENTIALS = (
    "no W&B API key (WANDB_API_KEY, or `wandb login`): set one, or log offline with track.wandb_mode=offline "
    "(or WANDB_MODE=offline, which `ablate sync` takes too) and upload later with `wandb sync`"
)


ARM_ID_TAG, BASELINE_TAG, DEVICE_TAG = "ablate.arm_id:", "ablate.baseline", "ablate.device:"
"""The W&B tags ablate puts on a run (besides group = sweep and job type = arm): its arm id, whether it is a seed of
the baseline arm, and the kind of device it trains on, which `ablate rank` reads back (ablate.curves.tracked)."""


def tags(ctx: TrackContext) -> list[str]:
    """`ablate.arm_id:<id>`, `ablate.baseline` (baseline seeds only) and `ablate.device:<cpu|cuda>` (when known)."""
    out = [ARM_ID_TAG + ctx.arm_id]
    if ctx.baseline:
        out.append(BASELINE_TAG)
    if ctx.device:
        out.append(DEVICE_TAG + ctx.device)
    return out


def mode(options: Any) -> str:
    """online | offline (W&B's other modes pass through): the recipe's `track.wandb_mode`, else $WANDB_MODE, else
    online."""
    return str(getattr(options, "wandb_mode", None) or os.environ.get("WANDB_MODE") or "online")


def project(options: Any) -> str:
    return str(getattr(options, "project", None) or os.environ.get("WANDB_PROJECT") or "ablate")


def saved_id(run_dir: Path) -> str | None:
    """The W&B run id an earlier attempt of this run directory opened (None: none did, or the file is damaged)."""
    path = run_dir / STATE_FILE
    if not path.exists():
        return None
    try:
        saved = store.read_json(path)
    except ValueError:  # torn or edited: treated as a fresh directory
        return None
    return str(saved["id"]) if isinstance(saved, dict) and isinstance(saved.get("id"), str) else None


class WandbTracker:
    """Mirrors a run to W&B through its own `wandb.Run` (never the global `wandb.run`: the fan-out calls it from a
    background thread, and TRL's own reporting stays off)."""

    name = "wandb"

    def __init__(self) -> None:
        self._run: Any = None
        self._last = -1
        """The last step the W&B run holds: a line up to it is not sent."""

    def start(self, ctx: TrackContext, resumed_from: int | None) -> None:
        """Open the W&B run this directory logs to, then send the lines metrics.jsonl kept from earlier attempts
        (up to `resumed_from`) that it lacks: online, those above the server's last step; offline, all of them, so
        that this attempt's offline folder alone holds the run's whole history. Offline, the `wandb sync` command of
        that folder is printed."""
        import wandb

        how = mode(ctx.options)
        offline = how in ("offline", "dryrun")
        if how == "online" and not wandb.login(prompt=False, verify=False):
            raise RuntimeError(NO_CREDENTIALS)  # never a login prompt on a background thread
        fs.make_dirs(fs.check_no_links(ctx.run_dir / "wandb", ctx.run_dir))
        state = fs.check_no_links(ctx.run_dir / STATE_FILE, ctx.run_dir)
        saved = saved_id(ctx.run_dir)
        if saved is not None or how != "online":  # this directory's own W&B run (offline: ids meet only at sync)
            wandb_id = saved or ctx.run_id
            self._run = self._init(wandb, ctx, how, wandb_id, "allow")
        else:
            wandb_id = self._open_new(wandb, ctx)
        self._last = int(self._run.starting_step) - 1 if self._run.resumed and not offline else -1
        fs.make_dirs(state.parent)
        store.write_json(state, {"id": wandb_id})
        if resumed_from is not None:
            for record in store.read_jsonl(ctx.run_dir / "metrics.jsonl"):
                step = record.get("step")
                if isinstance(step, int) and step <= resumed_from:
                    self.log(record)
        if offline:
            folder = self._run.settings.sync_dir
            ctx.note(f"W&B run {wandb_id} is logged offline; upload it with: wandb sync {folder}")

    def _open_new(self, wandb: Any, ctx: TrackContext) -> str:
        """A fresh directory online: its W&B run is opened with resume="never", so a W&B run of the same id (a
        --force re-run's archived directory, the same config in another sweep of the project) is never continued
        or changed; if W&B refuses the id, the run logs to `<run_id>-<4 hex>` instead, with one warning."""
        try:
            self._run = self._init(wandb, ctx, "online", ctx.run_id, "never")
            return ctx.run_id
        except RuntimeError as first:
            new_id = f"{ctx.run_id}-{secrets.token_hex(2)}"
            try:
                self._run = self._init(wandb, ctx, "online", new_id, "never")
            except RuntimeError:
                raise first from None  # not the id: the server, the network or the credentials
        warn(
            f"W&B refused run id {ctx.run_id} in project {project(ctx.options)} (a W&B run of that id exists: a "
            f"--force re-run, or the same config in another sweep); this run logs to a new W&B run {new_id}"
        )
        return new_id

    @staticmethod
    def _init(wandb: Any, ctx: TrackContext, how: str, wandb_id: str, resume: str) -> Any:
        """`wandb.init` of the W&B run `wandb_id`, on this thread, with nothing printed and nothing captured."""
        timeout = {} if os.environ.get("WANDB_INIT_TIMEOUT") else {"init_timeout": INIT_TIMEOUT_S}
        settings = wandb.Settings(
            silent=True,
            quiet=True,
            console="off",
            disable_git=True,
            disable_code=True,
            finish_timeout=FINISH_TIMEOUT_S,
            **timeout,
        )
        try:
            return wandb.init(
                dir=str(ctx.run_dir),
                id=wandb_id,
                project=project(ctx.options),
                entity=getattr(ctx.options, "entity", None) or os.environ.get("WANDB_ENTITY") or None,
                group=ctx.sweep,
                job_type=ctx.arm_label,
                name=ctx.label,
                tags=tags(ctx),
                config=ctx.config,
                resume=resume,
                mode=how,
                reinit="create_new",
                settings=settings,
            )
        except Exception as e:
            where = "" if how != "online" else f" {os.environ.get('WANDB_BASE_URL') or 'https://api.wandb.ai'}"
            raise RuntimeError(
                f"wandb.init could not open the W&B run{where} ({type(e).__name__}: {e}); check the server, the "
                "network and the credentials, or log offline with track.wandb_mode=offline"
            ) from e

    def log(self, record: dict[str, Any]) -> None:
        step = record.get("step")
        if not isinstance(step, int) or isinstance(step, bool) or step <= self._last:
            return
        self._run.log(numbers(record), step=step)
        self._last = step

    def finish(self, state: str) -> None:
        """The run's state in the W&B summary (`state`), and the W&B run finished: exit code 0 for done, 1 for any
        other end (W&B shows it failed; a preempted run continues on its next attempt)."""
        self._run.summary["state"] = str(state)
        self._run.finish(exit_code=0 if state == "done" else 1)
