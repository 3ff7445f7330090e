"""metrics.jsonl, metrics.csv and optional TensorBoard: one row per log step/evaluation.

Every row has ``step`` (optimisation steps done), ``epoch`` (0-based epoch of that step's
batch), ``split`` ("train" or "val"), ``lr`` (the lr the step used) and ``time`` (seconds
of training so far, summed over resumed segments), then the metrics: training metrics by
the model's names, validation metrics prefixed ``val_``. The JSONL file is the record
(one object per line, only the row's own keys); the CSV has one header that is the union
of all keys seen, in first-seen order, with empty cells where a row has no value. When a
row brings a new key, the CSV is rewritten with the wider header (atomically).

On resume, rows with ``step`` after the checkpoint's step (written by the killed run after
its last checkpoint) are dropped, so a resumed run's files equal an uninterrupted run's.
"""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

from simsci._io import atomic_path
from simsci.errors import MissingExtraError

LEAD = ("step", "epoch", "split", "lr", "time")


def tensorboard_writer_class():
    """``torch.utils.tensorboard.SummaryWriter``, or an ImportError that says what to install."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as exc:
        raise MissingExtraError(
            "TrainConfig(tensorboard=True) needs the tensorboard package, which is not "
            f"installed ({exc}); pip install 'simsci[tensorboard]' (or tensorboard), or set "
            "tensorboard=False (metrics.csv and metrics.jsonl are always written)"
        ) from exc
    return SummaryWriter


def _json_value(v):
    # JSON has no NaN/inf; write them as strings the reader turns back into floats
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    return v


def read_rows(path: Path) -> list[dict]:
    """Rows of a metrics.jsonl; a torn last line (a kill mid-write) is skipped."""
    rows = []
    if not path.is_file():
        return rows
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict):
            rows.append({k: float(v) if v in ("nan", "inf", "-inf") else v for k, v in row.items()})
    return rows


class MetricsLog:
    """Appends rows to ``out_dir/metrics.jsonl`` and ``out_dir/metrics.csv``."""

    def __init__(self, out_dir: Path, *, keep_until: int | None, tensorboard: bool):
        self.jsonl_path = out_dir / "metrics.jsonl"
        self.csv_path = out_dir / "metrics.csv"
        self.rows = []
        if keep_until is not None:
            self.rows = [r for r in read_rows(self.jsonl_path) if r.get("step", 0) <= keep_until]
        self.columns = list(LEAD)
        for row in self.rows:
            self._extend_columns(row)
        with atomic_path(self.jsonl_path) as tmp:
            tmp.write_text("".join(self._json_line(r) for r in self.rows))
        self._rewrite_csv()
        self._jsonl = open(self.jsonl_path, "a")  # noqa: SIM115 (closed in close())
        self.tb = None
        if tensorboard:
            writer = tensorboard_writer_class()
            self.tb = writer(
                log_dir=str(out_dir / "tensorboard"),
                purge_step=(keep_until + 1) if keep_until else None,
            )

    @staticmethod
    def _json_line(row: dict) -> str:
        return json.dumps({k: _json_value(v) for k, v in row.items()}) + "\n"

    def _extend_columns(self, row: dict) -> bool:
        new = [k for k in row if k not in self.columns]
        self.columns.extend(new)
        return bool(new)

    def _csv_text(self, rows, *, header: bool) -> str:
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=self.columns, lineterminator="\n")
        if header:
            writer.writeheader()
        writer.writerows(rows)
        return buf.getvalue()

    def _rewrite_csv(self) -> None:
        with atomic_path(self.csv_path) as tmp:
            tmp.write_text(self._csv_text(self.rows, header=True))

    def write(self, row: dict) -> None:
        """Append one row (keys: LEAD first, then metrics) to both files."""
        self.rows.append(row)
        self._jsonl.write(self._json_line(row))
        self._jsonl.flush()
        if self._extend_columns(row):
            self._rewrite_csv()
        else:
            with open(self.csv_path, "a") as f:
                f.write(self._csv_text([row], header=False))
        if self.tb is not None:
            split = row["split"]
            for k, v in row.items():
                if k in ("step", "epoch", "split", "time") or not isinstance(v, (int, float)):
                    continue
                if k == "lr":
                    if split == "train":
                        self.tb.add_scalar("lr", v, row["step"])
                    continue
                self.tb.add_scalar(f"{split}/{k.removeprefix('val_')}", v, row["step"])
            self.tb.flush()

    def close(self) -> None:
        self._jsonl.close()
        if self.tb is not None:
            self.tb.close()
