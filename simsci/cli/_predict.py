"""``simsci predict``: a trained series model's predictions at the times a user asks.

``simsci predict CKPT --context FILE (--times LIST | --at FILE) --out FILE`` conditions
on every episode of the context file and writes the predictive mean (``x``) and variance
(``x_var``) at the asked times, in the data's units, as a trajectory file. With ``--at``,
the asked times of context episode i are the times of episode i of the other file, and
where that file has observed values the command also scores the predictions on them.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from simsci.cli._common import HelpFormatter, add_device, add_out

DESCRIPTION = """\
Predict with a checkpoint of a series model (sdevi, gru_dt, latent_ode, latent_sde,
linear_ode) at given times, conditioned on the observations of a context file.

The output is a trajectory file (kind state): one episode per context episode, step
fields t (the asked times), x (the predictive mean) and x_var (the predictive variance
of a new observation), in the data's own units; episode field context_episode (the
episode's index in the context file), and the context's params, label and split.
--split (default all) selects the context episodes, and the --at file's when it has
a split field.

times:
  --times 0.5,1,2.5    a comma-separated list, the same for every episode
  --times 0:10:101     101 evenly spaced times from 0 to 10 (START:STOP:NUM)
  --at FILE            episode i of FILE gives the times of context episode i (the
                       files must hold as many episodes after --split); the values FILE
                       observes there are scored: mse (data units and normalised by
                       the data's std), nll and coverage95 of the 95% intervals

Times are absolute, in the data's time units, and may lie before, between or after
the context's observations.

example:
  simsci predict runs/sdevi/checkpoints/best.pt --context data/ctx.h5 \\
      --times 0:10:201 --out pred.h5
"""


def add_to(sub) -> None:
    p = sub.add_parser(
        "predict",
        help="predict a series model at given times from a context file",
        description=DESCRIPTION,
        formatter_class=HelpFormatter,
    )
    p.set_defaults(run=run_predict, cli_parser=p)
    p.add_argument("checkpoint", help="a checkpoint written by simsci train (.pt)")
    p.add_argument("--context", required=True, help="trajectory file: the observations")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument(
        "--times", help="times to predict at: 'T1,T2,...' or 'START:STOP:NUM' (or both)"
    )
    where.add_argument("--at", help="trajectory file whose episode i gives the times")
    p.add_argument(
        "--split", default="all", help="train, val, test or all: the context episodes read"
    )
    p.add_argument("--batch-size", type=int, default=64, help="episodes per model call")
    add_device(p)
    add_out(p, "file", help="the predictions (a trajectory file, .h5)", required=True)


def parse_times(text: str):
    """``'0.5,1,2.5'`` and ``'START:STOP:NUM'`` parts, comma-separated, as one sorted
    float64 array (repeats removed)."""
    import numpy as np

    values: list[float] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        if ":" in part:
            pieces = part.split(":")
            try:
                start, stop, num = float(pieces[0]), float(pieces[1]), int(pieces[2])
                if len(pieces) != 3 or num < 1:
                    raise ValueError
            except (ValueError, IndexError):
                raise ValueError(
                    f"--times: {part!r} is not START:STOP:NUM (e.g. 0:10:101, NUM >= 1)"
                ) from None
            values.extend(np.linspace(start, stop, num).tolist())
        else:
            try:
                values.append(float(part))
            except ValueError:
                raise ValueError(f"--times: {part!r} is not a number") from None
    times = np.unique(np.asarray(values, dtype=np.float64))
    if times.size == 0:
        raise ValueError("--times holds no time")
    if not np.isfinite(times).all():
        raise ValueError(f"--times holds a non-finite time: {text!r}")
    return times


def _select(traj, split: str):
    """The episodes of ``split`` ('all' keeps every one) and their indices in the file."""
    import numpy as np

    from simsci.data import SPLITS

    index = np.arange(len(traj))
    if split == "all":
        return traj, index
    if split not in SPLITS:
        raise ValueError(f"--split must be train, val, test or all, got {split!r}")
    if "split" not in traj.episode_fields:
        raise ValueError(f"{traj.path} has no split field; use --split all")
    keep = traj.column("split") == SPLITS[split]
    if not keep.any():
        raise ValueError(f"{traj.path} has no episode in split {split!r}")
    return traj[keep], index[keep]


def _load_series_model(path, device):
    from simsci import train
    from simsci.models import SeriesModel

    model = train.load_model(path)
    if not isinstance(model, SeriesModel):
        raise ValueError(
            f"simsci predict serves the series models (sdevi, gru_dt, latent_ode, "
            f"latent_sde, linear_ode); {path} holds a {type(model).__name__}"
        )
    return model.to(device).eval()


def run_predict(args) -> int:
    from simsci import data
    from simsci._device import resolve_device

    if args.batch_size < 1:
        raise ValueError(f"--batch-size must be >= 1, got {args.batch_size}")
    model = _load_series_model(args.checkpoint, resolve_device(args.device))
    context, index = _select(data.open(args.context), args.split)
    if "x" not in context.step_fields:
        raise ValueError(f"{args.context} has no step field 'x' to condition on")
    episodes = [context[i] for i in range(len(context))]
    targets = None
    if args.at is not None:
        at = data.open(args.at)
        if "split" in at.episode_fields:  # else its episodes pair with the selected ones
            at, _ = _select(at, args.split)
        if len(at) != len(episodes):
            raise ValueError(
                f"--at {args.at} holds {len(at)} episodes and --context {args.context} "
                f"{len(episodes)} (split {args.split!r}); episode i of one gives the times "
                "of episode i of the other"
            )
        targets = [at[i] for i in range(len(at))]
        times = [target["t"] for target in targets]
    else:
        times = parse_times(args.times)
    preds = model.predict(episodes, times, batch_size=args.batch_size)
    _write(args, model, context, index, episodes, preds)
    print(f"wrote {len(preds)} episodes, {sum(len(p['t']) for p in preds)} predictions: {args.out}")
    if targets is not None:
        scores = _scores(model, targets, preds)
        if scores is not None:
            print(json.dumps(scores, indent=2))
    return 0


def _write(args, model, context, index, episodes, preds) -> None:
    from simsci import data

    extra = [k for k in ("params", "label", "split") if k in context.episode_fields]
    names = context.names("x")
    meta = {
        "predicted_by": {
            "checkpoint": str(Path(args.checkpoint)),
            "model": type(model).__name__,
            "context": str(Path(args.context)),
            "split": args.split,
            **({"times": args.times} if args.times else {"at": str(Path(args.at))}),
        }
    }
    with data.TrajectoryWriter(
        args.out,
        kind="state",
        system=context.system,
        meta=meta,
        names={"x": names, "x_var": names} if names else None,
        episode_fields=["context_episode"],
    ) as writer:
        for i, (episode, pred) in enumerate(zip(episodes, preds)):
            row = {"t": pred["t"], "x": pred["mean"], "x_var": pred["var"]}
            row["context_episode"] = int(index[i])
            row.update({k: episode[k] for k in extra})
            writer.append(row)


def _scores(model, targets, preds) -> dict | None:
    """Scores of the predictions on the values the --at file observes (None when it
    observes none): mse in data units, nmse (per channel / the data's variance), nll per
    value (Gaussian, data units) and coverage95."""
    import numpy as np

    std = model.data_std.double().cpu().numpy()
    err, nerr, nll, inside = [], [], [], []
    for target, pred in zip(targets, preds):
        if "x" not in target:
            return None
        x = np.asarray(target["x"], dtype=np.float64)
        if "mask" in target:
            x = np.where(np.asarray(target["mask"], bool), x, np.nan)
        mean, var = np.asarray(pred["mean"], np.float64), np.asarray(pred["var"], np.float64)
        if x.shape != mean.shape:
            raise ValueError(
                f"the --at file's x has shape {x.shape} per episode where the predictions "
                f"have {mean.shape}: not the model's channels"
            )
        seen = np.isfinite(x)
        diff2 = (mean - x) ** 2
        err.append(diff2[seen])
        nerr.append((diff2 / std**2)[seen])
        nll.append((0.5 * (diff2 / var + np.log(2 * math.pi * var)))[seen])
        inside.append((diff2 / var < 1.959964**2)[seen])
    n = sum(len(e) for e in err)
    if n == 0:
        return None
    cat = np.concatenate
    return {
        "n_values": int(n),
        "mse": float(cat(err).mean()),
        "nmse": float(cat(nerr).mean()),
        "nll": float(cat(nll).mean()),
        "coverage95": float(cat(inside).mean()),
    }
