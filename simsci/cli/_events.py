"""``simsci events predict|generate``: next-event predictions and sampled sequences from a
trained event model (cocld, rmtpp, nhp, thp, poisson_tpp); one sub-parser per action."""

from __future__ import annotations

from simsci.cli._common import (
    add_action,
    add_device,
    add_episodes,
    add_group,
    add_out,
    add_seed,
)

DESCRIPTION = """\
Use a trained event model (a checkpoint of `simsci train cocld|rmtpp|nhp|thp|poisson_tpp`).
Run 'simsci events ACTION --help' for each action's options.

examples:
  simsci train cocld --data data/population.h5 --out runs/cocld --epochs 10
  simsci events predict runs/cocld/checkpoints/best.pt --data data/population.h5 --out pred.jsonl
  simsci events generate runs/cocld/checkpoints/best.pt -n 100 --t-start 0 --t-end 72 --out gen.h5
  simsci events generate runs/cocld/checkpoints/best.pt --continue data/population.h5 \\
      --prefix 5 --out cont.h5
"""

PREDICT_DESCRIPTION = """\
For every event after the first of each sequence in --data, the expected time and the
most likely type of the next event given the history before it (from the model's
intensity), written as JSON lines with the truth: episode, index, t_predicted,
mark_predicted, t, mark. Deterministic: draws no random numbers.

example:
  simsci events predict runs/cocld/checkpoints/best.pt --data data/population.h5 --out pred.jsonl
"""

GENERATE_DESCRIPTION = """\
Sample sequences by thinning and write them as a kind="events" trajectory file.
--continue DATA continues each sequence of a file (its --prefix first events) up to its
window's end (else its last event time); otherwise -n/--episodes new sequences on
[--t-start, --t-end] (CoCLD draws each individual's start from its population latent law
at --t-start; the other models only continue a history).

examples:
  simsci events generate runs/cocld/checkpoints/best.pt -n 100 --t-start 0 --t-end 72 --out gen.h5
  simsci events generate runs/cocld/checkpoints/best.pt --continue data/population.h5 \\
      --prefix 5 --out cont.h5
"""

CHECKPOINT_HELP = "a checkpoint of an event model (.pt)"
SPLIT_HELP = "the episodes of the file to use: train, val, test or all"


def add_to(sub) -> None:
    actions = add_group(
        sub,
        "events",
        help="predict next events and sample sequences with a trained event model",
        description=DESCRIPTION,
    )
    p = add_action(
        actions,
        "predict",
        help="next-event predictions for every event of a file (JSON lines)",
        description=PREDICT_DESCRIPTION,
        run=run,
    )
    p.add_argument("checkpoint", metavar="CHECKPOINT", help=CHECKPOINT_HELP)
    p.add_argument("--data", required=True, help="the event file (or EasyTPP data)")
    p.add_argument("--split", default="test", help=SPLIT_HELP)
    p.add_argument("--batch-size", type=int, default=64, help="sequences per forward pass")
    add_device(p)
    add_out(p, "file", help="the predictions to write (.jsonl)", required=True)

    g = add_action(
        actions,
        "generate",
        help="sample new sequences, or continue those of a file",
        description=GENERATE_DESCRIPTION,
        run=run,
    )
    g.add_argument("checkpoint", metavar="CHECKPOINT", help=CHECKPOINT_HELP)
    g.add_argument(
        "--continue",
        dest="continue_from",
        metavar="DATA",
        default=None,
        help="continue this file's sequences (or EasyTPP data's) instead of starting new ones",
    )
    g.add_argument("--prefix", type=int, default=1, help="with --continue: events kept as history")
    g.add_argument("--split", default="test", help=f"with --continue: {SPLIT_HELP}")
    add_episodes(
        g, default=None, help="new sequences to generate (without --continue)", deprecated=("--n",)
    )
    g.add_argument("--t-start", type=float, default=0.0, help="start of the new sequences")
    g.add_argument(
        "--t-end", type=float, default=None, help="end of the new sequences (needed with -n)"
    )
    g.add_argument("--group", type=int, default=0, help="population id of the new sequences")
    g.add_argument("--max-events", type=int, default=1000, help="cap per generated sequence")
    g.add_argument("--batch-size", type=int, default=64, help="sequences sampled together")
    add_seed(g, help="the seed of the sampling")
    add_device(g)
    add_out(g, "file", help="the event file to write (.h5)", required=True)


def run(args) -> int:
    from simsci import train
    from simsci._device import resolve_device
    from simsci.models import EventModel

    model = train.load_model(args.checkpoint)
    if not isinstance(model, EventModel):
        raise ValueError(
            f"{args.checkpoint} holds a {type(model).__name__}, not an event model "
            "(cocld, rmtpp, nhp, thp, poisson_tpp)"
        )
    from simsci.cli._train import event_data_path

    for key in ("data", "continue_from"):  # EasyTPP data is converted on the fly
        if getattr(args, key, None) is not None:
            setattr(args, key, event_data_path(getattr(args, key)))
    device = resolve_device(args.device)
    model.to(device).eval()
    if args.events_action == "predict":
        return _predict(model, args, device)
    return _generate(model, args, device)


def _predict(model, args, device) -> int:
    import json

    import torch

    from simsci import data
    from simsci._io import atomic_path
    from simsci.models import event_items

    traj = data.open(args.data)
    items = event_items(traj, None if args.split == "all" else args.split)
    lines = []
    with torch.no_grad():
        for a in range(0, len(items), args.batch_size):
            chunk = items[a : a + args.batch_size]
            batch = {
                k: v.to(device) if torch.is_tensor(v) else v
                for k, v in model.collate(chunk).items()
            }
            H = model.history(batch)
            offset, kind = model.predict_from_state(H[:, :-1], batch["t"][:, :-1])
            for b, item in enumerate(chunk):
                n = int(batch["length"][b])
                for j in range(n - 1):
                    t_j = float(batch["t"][b, j])
                    lines.append(
                        json.dumps(
                            {
                                "episode": item["episode"],
                                "index": j + 1,
                                "t_predicted": t_j + float(offset[b, j]),
                                "mark_predicted": int(kind[b, j]),
                                "t": float(batch["t"][b, j + 1]),
                                "mark": int(batch["mark"][b, j + 1]),
                            }
                        )
                    )
    with atomic_path(args.out) as tmp:
        tmp.write_text("\n".join(lines) + "\n")
    print(f"wrote {len(lines)} predictions to {args.out}")
    return 0


def _generate(model, args, device) -> int:
    import numpy as np
    import torch

    from simsci import data
    from simsci.processes import write_event_file

    gen = torch.Generator(device=device).manual_seed(args.seed)
    seqs = []
    if args.continue_from is not None:
        if args.prefix < 1:
            raise ValueError(f"--prefix must be >= 1 (the history to continue), got {args.prefix}")
        traj = data.open(args.continue_from)
        from simsci.models import event_items

        items = event_items(traj, None if args.split == "all" else args.split)
        for a in range(0, len(items), args.batch_size):
            chunk = items[a : a + args.batch_size]
            # to each sequence's window end where the file records it, else its last event
            ends = [
                float(
                    np.asarray(it.get("t_end", it["window"][1] if "window" in it else it["t"][-1]))
                )
                for it in chunk
            ]
            heads = [
                {**it, **{k: it[k][: args.prefix] for k in ("t", "mark", "loc_id") if k in it}}
                for it in chunk
            ]
            batch = {
                k: v.to(device) if torch.is_tensor(v) else v
                for k, v in model.collate(heads).items()
            }
            new = model.sample(
                batch,
                torch.tensor(ends, dtype=torch.float64),
                max_new=args.max_events,
                generator=gen,
            )
            for it, head, seq in zip(chunk, heads, new):
                out = {k: np.concatenate([head[k], seq[k]]) for k in seq}
                out["group"] = np.int64(np.asarray(it.get("group", 0)).reshape(-1)[0])
                seqs.append(out)
    else:
        if args.episodes is None or args.episodes < 1 or args.t_end is None:
            raise ValueError(
                "events generate needs -n/--episodes N and --t-end (or --continue FILE)"
            )
        if not hasattr(model, "generate"):
            raise ValueError(
                f"{type(model).__name__} generates only continuations of a history: use "
                "--continue FILE (CoCLD can start new sequences from its population law)"
            )
        for a in range(0, args.episodes, args.batch_size):
            n = min(args.batch_size, args.episodes - a)
            new = model.generate(
                torch.full((n,), args.t_start, dtype=torch.float64),
                torch.full((n,), args.t_end, dtype=torch.float64),
                args.group,
                max_events=args.max_events,
                generator=gen,
            )
            for seq in new:
                if len(seq["t"]):
                    seqs.append({**seq, "group": np.int64(args.group)})
    if not seqs:
        raise ValueError("the model generated no events in the given window")
    path = write_event_file(
        args.out,
        seqs,
        system=f"generated:{type(model).__name__}",
        num_marks=model.num_marks,
        seed=args.seed,
        meta={"checkpoint": str(args.checkpoint), "day_length": model.day_length},
    )
    print(f"wrote {len(seqs)} sequences ({sum(len(s['t']) for s in seqs)} events) to {path}")
    return 0
