"""The two small measurement files ablate writes and reads back: a seed spread (`NoiseFloor`, written by `rank
--save-noise`, read by `noise=`) and a task model (`TaskModel`, written by `plan --save-calibration`, read by
`calibration=`). Both may come from a colleague or a shared folder, so each is read within bounds and every number
is type- and range-checked before it reaches a simulation; anything else is one SettingError naming the setting,
the file and the fix. docs/json.md gives their keys."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from ablate.errors import SettingError
from ablate.fit.spread import LOG_COMPUTE, MAX_DOF, MAX_SD_A, MAX_SD_LOGC, NoiseFloor
from ablate.fit.taskmodel import CALIBRATION_BOUNDS, OPTIONAL_FIELDS, TaskModel

MAX_FILE_BYTES = 1 << 20
"""A noise file is ~200 bytes and a calibration ~1 KB: a file past 1 MiB is not one, and is not read into memory."""
NOISE_FIX = "write one with `ablate rank SWEEP --save-noise FILE` on a sweep with seeds"
CALIBRATION_FIX = "write one with `ablate plan SWEEP_DIR --save-calibration FILE`"


def load_noise(path: Path | str) -> NoiseFloor:
    """A stored seed spread. A spread is finite and > 0 (a zero spread would make every difference significant), at
    most MAX_SD_A / MAX_SD_LOGC (beyond them it describes no seeds), and dof an integer in [1, MAX_DOF]."""
    d = read_json_object(path, "noise", NOISE_FIX)
    fix = "it needs sd_A, sd_logc and dof, as --save-noise writes"
    source = d.get("source", "?")
    if not isinstance(source, str):
        raise _bad("noise", path, f"not a noise file (source is {shown(source)}, not text); {fix}")
    floor = NoiseFloor(
        sd_A=number(d, "sd_A", "noise", path, 0.0, MAX_SD_A, fix=fix, above=True),
        sd_logc=number(d, "sd_logc", "noise", path, 0.0, MAX_SD_LOGC, fix=fix, above=True),
        dof=number(d, "dof", "noise", path, 1, MAX_DOF, fix=fix, integer=True),
        source=f"stored measurement {path} ({source})",
    )
    if d.get("log_compute") != LOG_COMPUTE:
        raise _bad(
            "noise",
            path,
            "its sd_logc is not the spread of log compute to three quarters of the gain that efficiency is tested "
            "on now (written by an older ablate); write it again with `ablate rank SWEEP --save-noise FILE`",
        )
    return floor


def load_calibration(path: Path | str) -> TaskModel:
    """A stored task model. Every field is type- and range-checked (CALIBRATION_BOUNDS): a number out of range sends
    the simulations where they cannot end (a compute scale of 1e-300) or overflow."""
    d = read_json_object(path, "calibration", CALIBRATION_FIX + " on a sweep that ran with seeds")
    fix = f"not a calibration file: {CALIBRATION_FIX}"
    got: dict[str, Any] = {}
    for key, (lo, hi, kind) in CALIBRATION_BOUNDS.items():
        got[key] = number(
            d,
            key,
            "calibration",
            path,
            lo,
            hi,
            fix=fix,
            integer=kind == "int",
            above=kind == "above",
            optional=key in OPTIONAL_FIELDS,
        )
    x, source, notes = d.get("x"), d.get("source", ""), d.get("notes", [])
    if not isinstance(x, str) or not x.strip() or len(x) > 200:
        raise _bad("calibration", path, f"x (the compute axis) must be a name such as gpu_hours; {fix}")
    if not isinstance(source, str) or not (isinstance(notes, list) and all(isinstance(n, str) for n in notes)):
        raise _bad("calibration", path, f"source must be text and notes a list of texts; {fix}")
    if not got["r0"] < got["a"]:
        raise _bad(
            "calibration",
            path,
            f"needs r0 < a (the ceiling above the start), got r0 {got['r0']:g}, a {got['a']:g}; {fix}",
        )
    return TaskModel(x=x, source=source, notes=list(notes), **got)


def _bad(setting: str, path: Path | str, why: str) -> SettingError:
    """What is wrong with the file given as `setting`, as `{setting} PATH: why`."""
    return SettingError(f"{{{setting}}} {path}: {why}", setting)


def shown(v: Any) -> str:
    """A value from a file, for an error line: its JSON, cut to 40 characters."""
    try:
        text = json.dumps(v, allow_nan=True)
    except (TypeError, ValueError):
        text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def read_json_object(path: Path | str, setting: str, fix: str) -> dict[str, Any]:
    """The JSON object of a small file ablate wrote: anything else (no file, a folder, a huge file, not UTF-8, not
    JSON, nested too deeply, not an object) is one SettingError naming the setting and the path, ending with
    `fix`."""
    p = Path(path)
    try:
        if p.is_dir():
            raise _bad(setting, p, f"is a directory, not a file; {fix}")
        size = p.stat().st_size
        if size > MAX_FILE_BYTES:
            raise _bad(setting, p, f"{size:,} bytes, more than a {setting} file ever holds ({MAX_FILE_BYTES:,}); {fix}")
        with open(p, "rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)
        d = json.loads(raw.decode("utf-8"))
    except FileNotFoundError:
        raise _bad(setting, p, f"no such file; {fix}") from None
    except UnicodeDecodeError:
        raise _bad(setting, p, f"not UTF-8 text, so not a {setting} file; {fix}") from None
    except RecursionError:
        raise _bad(setting, p, f"JSON nested too deeply, so not a {setting} file; {fix}") from None
    except ValueError as e:
        raise _bad(setting, p, f"not valid JSON ({str(e).split(':')[0]}); {fix}") from None
    except OSError as e:
        raise _bad(setting, p, f"can't read the file ({e.strerror or e}); {fix}") from None
    if not isinstance(d, dict):
        raise _bad(setting, p, f"not a {setting} file (a JSON {type(d).__name__}, not an object); {fix}")
    return d


def number(
    d: dict[str, Any],
    key: str,
    setting: str,
    path: Path | str,
    lo: float,
    hi: float,
    *,
    fix: str,
    integer: bool = False,
    above: bool = False,
    optional: bool = False,
) -> Any:
    """`d[key]` checked: a JSON number (true/false and "0.1" are not), an integer when `integer`, finite, in
    [lo, hi] (`above`: > lo). None when `optional` and missing or null. Else one SettingError naming the field."""
    if d.get(key) is None:
        if optional:
            return None
        raise _bad(setting, path, f"no {key}; {fix}")
    v = d[key]
    kind = "an integer" if integer else "a number"
    if isinstance(v, bool) or not isinstance(v, int if integer else (int, float)):
        raise _bad(setting, path, f"{key} is {shown(v)}, not {kind}; {fix}")
    try:
        fv = float(v)
    except OverflowError:
        fv = math.inf
    low = f"({lo:g}" if above else f"[{lo:g}"
    if not (math.isfinite(fv) and (fv > lo if above else fv >= lo) and fv <= hi):
        raise _bad(setting, path, f"{key} is {shown(v)}, out of range: {kind} in {low}, {hi:g}]; {fix}")
    return int(v) if integer else fv
