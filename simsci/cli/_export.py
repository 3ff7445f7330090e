"""``simsci export``: a checkpoint as files that run with plain torch, without simsci
(:func:`simsci.train.export_model`)."""

from __future__ import annotations

from simsci.cli._common import add_action, add_out

DESCRIPTION = """\
Export a trained model (a checkpoint written by simsci train or simsci.train.save_model)
for use without simsci: torch alone loads and runs it.

What is exported, per model:
  operator        OperatorModel.step(history[, action]): one autoregressive step, the
                  normalisation included (map task: OperatorModel.map(x))
  controlled_ode  ControlledODE.advance(state, action, dt): one control interval of
                  the training dt (the same RK4 steps)
  event_model     the conditional intensity after each event of complete sequences
                  (t, mark[, group]) at offsets tau, in data units (RMTPP,
                  NeuralHawkes, TransformerHawkes, PoissonTPP)
Other models are refused with the reason (CoCLD, say, calls Python code a traced
program cannot hold).

Files in --out:
  program.pt2          torch.export program: torch.export.load(path).module()(*inputs);
                       the batch axis is free when the function allows it (see the
                       manifest); program.pt (TorchScript, torch.jit.load) instead where
                       torch.export cannot trace the function
  weights.safetensors  the model's state_dict (complex tensors as real views, listed in
                       the metadata entry complex_as_real)
  example.safetensors  the example inputs and the simsci model's outputs on them
  manifest.json        model class and init_args, the function, inputs and outputs
                       (shape, dtype, meaning), how to load, versions, sha256 of each file

The program does not check its inputs (shapes, NaN): the manifest says what it takes.

--example-shape sets the shape of the first input (default: the model's own example):
  operator (B, in_frames, *grid, C) or map (B, *grid, C); controlled_ode (B,
  *state_shape); event_model (B, L) or (B, L, G): L events per sequence, G offsets.

example:
  simsci export runs/dno/checkpoints/last.pt --out runs/dno/export
  simsci export runs/dno/checkpoints/last.pt --example-shape 4,1,256,1 --out runs/dno/export
"""


def add_to(sub) -> None:
    p = add_action(
        sub,
        "export",
        help="export a checkpoint to run with plain torch (torch.export, safetensors)",
        description=DESCRIPTION,
        run=run,
    )
    p.add_argument("checkpoint", help="a checkpoint written by simsci train (.pt)")
    p.add_argument(
        "--example-shape",
        metavar="N,N,...",
        help="shape of the first input of the example the program is traced on "
        "(comma-separated ints; default: the model's own)",
    )
    add_out(p, "dir", help="where the program, weights and manifest go", required=True)


def parse_shape(text: str | None) -> list[int] | None:
    """``'4,1,256,1'`` -> ``[4, 1, 256, 1]`` (None stays None)."""
    if text is None:
        return None
    try:
        shape = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ValueError(
            f"--example-shape: {text!r} is not a list of ints (e.g. 4,1,256,1)"
        ) from None
    if not shape or min(shape) < 1:
        raise ValueError(f"--example-shape: {text!r} needs positive ints (e.g. 4,1,256,1)")
    return shape


def run(args) -> int:
    from simsci.train import export_model

    manifest = export_model(args.checkpoint, args.out, example=parse_shape(args.example_shape))
    prog = manifest["program"]
    shapes = ", ".join(f"{i['name']} {tuple(i['shape'])}" for i in manifest["inputs"])
    free = ", ".join(
        f"{i['name']} {'/'.join(str(a['axis']) for a in i['free_axes'])}"
        for i in manifest["inputs"]
        if i["free_axes"]
    )
    print(f"exported {manifest['kind']} ({manifest['model']['class']}): {manifest['function']}")
    print(f"  {prog['file']} ({prog['format']}; example {shapes}; free axes: {free or 'none'})")
    if prog["why_not_torch_export"]:
        print(f"  torch.export could not trace it: {prog['why_not_torch_export']}")
    print(f"  weights.safetensors, example.safetensors, manifest.json in {args.out}")
    return 0
