"""``export_model``: a trained model as files that run with plain torch, without simsci.

What a model exports is its own choice: a model that can be exported defines
``export_spec(example_shape=None) -> dict`` (``OperatorModel``, ``ControlledODE`` and
the event models do), with

- ``kind``: a short name (``"operator"``, ``"controlled_ode"``, ``"event_model"``);
- ``module``: an ``nn.Module`` whose ``forward(*inputs)`` is the exported function
  (holding the model as a submodule, so the program's weights keep the model's names
  under one prefix);
- ``inputs``: example input tensors (batch first), ``input_names``, ``inputs_doc``
  (name -> meaning), ``output_names``, ``outputs_doc``, and ``function``: a sentence
  naming the model method it equals;
- optionally ``free_axes``: input name -> axes besides the batch axis that may stay free
  in the program (an operator's grid, an event model's sequence length).

``export_model`` then writes, into ``out_dir``:

- ``program.pt2`` (``torch.export``; the batch axis and the spec's ``free_axes`` stay
  free where the function allows it, the rest take the example's sizes: the manifest
  lists each input's free axes and their ranges) or, when ``torch.export`` cannot trace
  the function, ``program.pt`` (TorchScript, ``torch.jit.trace``, the example's shapes;
  the manifest says which and why);
- ``weights.safetensors``: the model's ``state_dict`` (what ``load_state_dict`` takes),
  complex tensors as real views (see :mod:`simsci.train._safetensors`);
- ``example.safetensors``: the example inputs and the outputs the simsci model gives
  on them, to check a loaded program against;
- ``manifest.json``: the model (class, ``init_args``), the function, its inputs and
  outputs (shape, dtype, meaning), how to load the program, the versions, and the
  sha256 of every file. Written last: a folder with a manifest is complete.

Every file is written atomically. Before anything is written the program is run on the
example and on a perturbed copy of it and compared with the model (a mismatch is an
error, not a file).
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import io
import logging
import os
import warnings
from pathlib import Path

import torch
from torch import nn

from simsci._io import atomic_path, write_json
from simsci.train._checkpoint import load_model, model_import_path, versions
from simsci.train._safetensors import COMPLEX_KEY, safetensors_bytes

__all__ = ["export_model", "EXPORT_FORMAT_VERSION"]

EXPORT_FORMAT_VERSION = 1
_SPEC_KEYS = ("kind", "module", "inputs", "input_names", "output_names", "function")
#: torch loggers that print graphs and guard failures while an export attempt fails
_TRACE_LOGGERS = ("torch.fx.experimental.symbolic_shapes", "torch._export", "torch.export")


# ------------------------------------------------------------------------- input
def _resolve(model_or_checkpoint) -> tuple[nn.Module, str | None]:
    """The model and the checkpoint path it came from (None for a module)."""
    if isinstance(model_or_checkpoint, nn.Module):
        return model_or_checkpoint, None
    if isinstance(model_or_checkpoint, (str, os.PathLike)):
        return load_model(model_or_checkpoint), str(model_or_checkpoint)
    raise TypeError(
        "export_model takes a checkpoint path (str or Path) or an nn.Module, got "
        f"{type(model_or_checkpoint).__name__}"
    )


def _spec(model: nn.Module, example) -> dict:
    """The model's export spec for ``example`` (None, a shape, or input tensors), checked."""
    hook = getattr(model, "export_spec", None)
    if not callable(hook):
        raise TypeError(
            f"{type(model).__name__} cannot be exported: it defines no export_spec() (the "
            "function to export and an example input). Exportable: simsci.operators."
            "OperatorModel, simsci.models.ControlledODE, the neural event models (RMTPP, "
            "NeuralHawkes, TransformerHawkes) and PoissonTPP"
        )
    if isinstance(example, torch.Tensor):
        example = (example,)
    tensors = example is not None and all(isinstance(x, torch.Tensor) for x in example)
    shape = None
    if example is not None and not tensors:
        try:
            shape = [int(v) for v in example]
        except (TypeError, ValueError):
            raise TypeError(
                f"example must be None, a shape (ints) or a tuple of input tensors, got {example!r}"
            ) from None
    spec = dict(hook(shape))
    missing = [k for k in _SPEC_KEYS if k not in spec]
    if missing:
        raise TypeError(f"{type(model).__name__}.export_spec() lacks {missing}")
    if tensors:
        example = tuple(example)
        if len(example) != len(spec["inputs"]):
            raise ValueError(
                f"{type(model).__name__}'s exported function takes {len(spec['inputs'])} "
                f"inputs ({', '.join(spec['input_names'])}), got {len(example)} tensors"
            )
        spec["inputs"] = example
    return spec


def _prefix(module: nn.Module, model: nn.Module) -> str:
    """The name under which ``model``'s weights appear in ``module``'s state dict."""
    for name, sub in module.named_modules():
        if sub is model:
            return f"{name}." if name else ""
    raise TypeError("export_spec()'s module must hold the model as a submodule")


# ----------------------------------------------------------------------- program
@contextlib.contextmanager
def _quiet():
    """No warnings, and none of the graph dumps torch prints (to its loggers and to
    sys.stderr) when an export attempt fails: the error says why, in one line."""
    loggers = [logging.getLogger(name) for name in _TRACE_LOGGERS]
    levels = [lg.level for lg in loggers]
    try:
        for lg in loggers:
            lg.setLevel(logging.CRITICAL)
        with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def _why(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()] or [""]
    return f"{type(exc).__name__}: {lines[0][:300]}"


def _trace(
    module: nn.Module, inputs: tuple, free: list[list[int]], what: str
) -> tuple[object, str, str | None]:
    """(program, format, why torch.export was not used). ``free[i]``: the axes of input i
    besides the batch axis that may stay free (``Dim.AUTO``: torch.export keeps them
    symbolic where the function allows, else fixes them to the example's size)."""
    batch = torch.export.Dim("batch", min=1)
    traced = inputs
    if all(x.ndim and x.shape[0] == 1 for x in inputs):
        # torch.export fixes every axis of size 1: trace a batch of two of the example
        traced = tuple(torch.cat([x, x]) for x in inputs)
    why = None
    for named_batch in (True, False):
        shapes = tuple(
            {0: batch if named_batch else torch.export.Dim.AUTO}
            | {axis: torch.export.Dim.AUTO for axis in axes}
            for axes in free
        )
        try:
            with _quiet():
                program = torch.export.export(module, traced, dynamic_shapes=shapes)
            return program, "torch.export", None
        except Exception as exc:  # noqa: BLE001  (any tracing failure: fall back)
            why = why or _why(exc)
    try:
        with _quiet():
            program = torch.jit.trace(module, inputs, check_trace=False)
            _program_bytes(program, "torchscript")  # what cannot be saved fails here
    except Exception as exc:  # noqa: BLE001
        raise TypeError(
            f"cannot export {what}: torch.export cannot trace it ({why}) and neither can "
            f"TorchScript ({_why(exc)}); only models whose function is plain tensor code "
            "(no Python callbacks, no data-dependent control flow) export"
        ) from exc
    return program, "torchscript", why


def _bound(value) -> int | None:
    """A range bound as an int, None for an infinite or unknown one."""
    try:
        return int(value)
    except (TypeError, ValueError, AttributeError, OverflowError):
        return None


def _free_axes(program, fmt: str, n_inputs: int) -> list[list[dict]]:
    """Per input, the axes the program leaves free: ``{"axis", "min", "max"}`` (max None
    for unbounded); none for a TorchScript trace (its shapes are the example's)."""
    if fmt != "torch.export":
        return [[] for _ in range(n_inputs)]
    names = list(program.graph_signature.user_inputs)
    nodes = {n.name: n for n in program.graph.nodes if n.op == "placeholder"}
    out = []
    for name in names[:n_inputs]:
        axes = []
        for axis, size in enumerate(nodes[name].meta["val"].shape):
            expr = getattr(getattr(size, "node", None), "expr", None)
            if expr is None or expr.is_number:  # a plain or a specialised size
                continue
            bounds = program.range_constraints.get(size.node.expr)
            low, high = (None, None) if bounds is None else (bounds.lower, bounds.upper)
            axes.append({"axis": axis, "min": _bound(low), "max": _bound(high)})
        out.append(axes)
    return out


def _run(program, fmt: str, inputs: tuple):
    fn = program.module() if fmt == "torch.export" else program
    with torch.no_grad():
        return fn(*inputs)


def _as_tuple(out) -> tuple:
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def _check_same(ref: tuple, got: tuple, names: list[str]) -> None:
    if len(ref) != len(got):
        raise TypeError(f"the program returns {len(got)} outputs, the model {len(ref)}")
    for name, r, g in zip(names, ref, got):
        if r.shape != g.shape or not torch.allclose(r, g, rtol=1e-5, atol=1e-6, equal_nan=True):
            err = (r.double() - g.double()).abs().max().item() if r.shape == g.shape else None
            raise TypeError(
                f"the exported program's {name!r} differs from the model's (shapes "
                f"{tuple(g.shape)} vs {tuple(r.shape)}, max error {err}): the function does "
                "not trace faithfully (values fixed at tracing?); nothing was written"
            )


def _perturbed(inputs: tuple) -> tuple:
    """The example with every float entry scaled by a random 1 +- 1% (integers kept)."""
    gen = torch.Generator().manual_seed(1)
    out = []
    for x in inputs:
        if x.is_floating_point():
            noise = torch.randn(x.shape, generator=gen, dtype=torch.float64)
            x = x * (1 + 0.01 * noise).to(x.device, x.dtype)
        out.append(x)
    return tuple(out)


def _program_bytes(program, fmt: str) -> bytes:
    buf = io.BytesIO()
    if fmt == "torch.export":
        torch.export.save(program, buf)
    else:
        torch.jit.save(program, buf)
    return buf.getvalue()


# ----------------------------------------------------------------------- writing
def _write(out_dir: Path, name: str, data: bytes) -> str:
    with atomic_path(out_dir / name) as tmp:
        tmp.write_bytes(data)
    return hashlib.sha256(data).hexdigest()


def _io_records(names, tensors, docs, free=None) -> list[dict]:
    return [
        {
            "name": name,
            "shape": list(t.shape),
            "dtype": str(t.dtype).removeprefix("torch."),
            "meaning": docs.get(name, ""),
            **({} if free is None else {"free_axes": free[i]}),
        }
        for i, (name, t) in enumerate(zip(names, tensors))
    ]


def _build(model: nn.Module, example) -> dict:
    """Spec -> program, checked against the model on the example (in eval mode; the
    model's mode is restored)."""
    was_training = model.training
    model.eval()
    try:
        spec = _spec(model, example)
        module, inputs = spec["module"], tuple(spec["inputs"])
        names, out_names = list(spec["input_names"]), list(spec["output_names"])
        with torch.no_grad():
            ref = _as_tuple(module(*inputs))
        extra = spec.get("free_axes", {})
        free = [sorted(set(extra.get(name, [])) - {0}) for name in names]
        program, fmt, why = _trace(module, inputs, free, type(model).__name__)
        _check_same(ref, _as_tuple(_run(program, fmt, inputs)), out_names)
        # a second input catches values a trace baked in as constants
        other = _perturbed(inputs)
        with torch.no_grad():
            ref2 = _as_tuple(module(*other))
        _check_same(ref2, _as_tuple(_run(program, fmt, other)), out_names)
        return {
            "spec": spec,
            "inputs": inputs,
            "names": names,
            "out_names": out_names,
            "ref": ref,
            "format": fmt,
            "why": why,
            "free_axes": _free_axes(program, fmt, len(inputs)),
            "program": _program_bytes(program, fmt),
            "state": {k: v.detach() for k, v in model.state_dict().items()},
            "prefix": _prefix(module, model),
        }
    finally:
        model.train(was_training)


def _write_files(out: Path, built: dict, cls_path: str) -> dict:
    """Program, weights and example into ``out``, atomically; ``{file: sha256}``."""
    out.mkdir(parents=True, exist_ok=True)
    fmt = built["format"]
    program_file = "program.pt2" if fmt == "torch.export" else "program.pt"
    stale = out / ("program.pt" if fmt == "torch.export" else "program.pt2")
    if stale.is_file():  # an earlier export's other program format
        stale.unlink()
    weights = safetensors_bytes(built["state"], {"format": "pt", "model": cls_path})
    example = dict(zip(built["names"], built["inputs"]))
    example.update(zip(built["out_names"], built["ref"]))
    return {
        program_file: _write(out, program_file, built["program"]),
        "weights.safetensors": _write(out, "weights.safetensors", weights),
        "example.safetensors": _write(
            out, "example.safetensors", safetensors_bytes(example, {"format": "pt"})
        ),
    }


def _manifest(built: dict, model: nn.Module, checkpoint: str | None, files: dict) -> dict:
    spec, fmt = built["spec"], built["format"]
    names, out_names = built["names"], built["out_names"]
    program_file = next(iter(files))
    load = (
        f"torch.export.load('{program_file}').module()"
        if fmt == "torch.export"
        else f"torch.jit.load('{program_file}')"
    )
    free_axes = built["free_axes"]
    return {
        "format": "simsci.export",
        "format_version": EXPORT_FORMAT_VERSION,
        "kind": spec["kind"],
        "model": {
            "class": model_import_path(model),
            "init_args": copy.deepcopy(getattr(model, "init_args", None)),
            "checkpoint": checkpoint,
        },
        "function": spec["function"],
        "program": {
            "file": program_file,
            "format": fmt,
            "load": load,
            "call": f"program({', '.join(names)}) -> {', '.join(out_names)}",
            "dynamic_batch": all(axes and axes[0]["axis"] == 0 for axes in free_axes),
            "why_not_torch_export": built["why"] if fmt != "torch.export" else None,
            "device": str(built["inputs"][0].device),
            "checks": "none: the program does not validate its inputs",
            **(
                {"note": "a trace: Python branches on values took the example's way"}
                if fmt == "torchscript"
                else {}
            ),
        },
        "inputs": _io_records(names, built["inputs"], spec.get("inputs_doc", {}), free_axes),
        "outputs": _io_records(out_names, built["ref"], spec.get("outputs_doc", {})),
        "weights": {
            "file": "weights.safetensors",
            "content": "the model's state_dict (non-persistent buffers such as "
            "normalisation constants are rebuilt from init_args)",
            "program_prefix": built["prefix"],
            "complex_as_real": sorted(k for k, v in built["state"].items() if v.is_complex()),
            "complex_metadata_key": COMPLEX_KEY,
        },
        "example": {
            "file": "example.safetensors",
            "content": f"inputs {names} and the simsci model's outputs {out_names} on them",
        },
        "versions": versions(),
        "sha256": files,
    }


def export_model(model_or_checkpoint, out_dir: str | os.PathLike, *, example=None) -> dict:
    """Export a trained model to ``out_dir`` for use with plain torch, without simsci.

    ``model_or_checkpoint``: a checkpoint path (``simsci.train.load_model`` rebuilds it)
    or a model. ``example``: None (the model's default example), the shape of the first
    input, or the input tensors (a tuple). Writes ``program.pt2`` (or ``program.pt``),
    ``weights.safetensors``, ``example.safetensors`` and ``manifest.json`` (see the
    module docstring; ``out_dir`` is created when missing) and returns the manifest.

    Load the program with torch alone::

        program = torch.export.load("OUT/program.pt2").module()  # format "torch.export"
        program = torch.jit.load("OUT/program.pt")                # format "torchscript"
        y = program(*inputs)

    Raises TypeError for a model that cannot be exported (no ``export_spec``, or its
    function does not trace) and ValueError for an example that does not fit it; nothing
    is written then.
    """
    model, checkpoint = _resolve(model_or_checkpoint)
    built = _build(model, example)
    out = Path(out_dir)
    files = _write_files(out, built, model_import_path(model))
    manifest = _manifest(built, model, checkpoint, files)
    write_json(out / "manifest.json", manifest)
    return manifest
