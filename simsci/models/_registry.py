"""The model registry's machinery: :class:`ModelEntry`, the entries of models that train
on trajectory files, and the adapters of DynaDiff and VectorWorld.

Every trainable model is one :class:`ModelEntry` in ``simsci.models.REGISTRY``: its name,
a one-line summary, the kinds of trajectory file it reads, how to build it
(``simsci.models.get``), how to train it (``simsci train NAME``) and how to load what
training wrote. The command dispatches through the entry alone, so a model with its own
training (DynaDiff's stages on a zoo, VectorWorld's three parts) is an entry like any
other, not a branch of the command.

- :func:`trajectory_entry`: a model of the training contract of :mod:`simsci.train`
  built by ``cls.from_data`` from one trajectory file and trained by one
  :class:`simsci.train.Trainer` run (every model of ``MODELS`` but the two below).
- :func:`dynadiff_entry`: DynaDiff's generator, trained on a model zoo and the zoo's
  multi-environment file (``simsci.models.dynadiff.train_generator``).
- :func:`vectorworld_entry`: VectorWorld's tile generator, VAE and ΔSim, trained on a
  scene file into one directory (``simsci.models.vectorworld.train_vectorworld``);
  only its public names are used here.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "ModelEntry",
    "ModelClasses",
    "trajectory_entry",
    "trajectory_dataset",
    "dynadiff_entry",
    "vectorworld_entry",
]


@dataclasses.dataclass(frozen=True)
class ModelEntry:
    """One trainable model of the registry.

    - ``name``: the registry name (``simsci train NAME``, ``simsci.models.get(NAME)``).
    - ``summary``: one line for listings (``simsci train --help``).
    - ``reads``: the kinds of trajectory file it trains on (``simsci.data.KINDS``).
    - ``model``: the class (or its import path ``"module:qualname"``, resolved on first
      use of :attr:`cls`, so a registry entry does not import its package).
    - ``build(**kwargs)``: what ``simsci.models.get(name, **kwargs)`` returns.
    - ``train(data, out, config, *, val_data=None, window=None, stride=None, task=None,
      model_args=None, resume=False) -> dict``: train on ``data`` (a file or folder of
      the kinds in ``reads``) into the run directory ``out``; ``config`` is a dict of
      :class:`simsci.train.TrainConfig` fields the caller set (a config file, then flags),
      laid over the model's own defaults; ``model_args`` the model's arguments
      (``--param``). Returns a JSON-able summary (``simsci train`` prints it).
    - ``load(path)``: the trained model from what ``train`` wrote.
    - ``needs``: inputs beside ``--data``, in words (empty when none).
    """

    name: str
    summary: str
    reads: tuple[str, ...]
    model: type | str
    build: Callable[..., Any]
    train: Callable[..., dict]
    load: Callable[..., Any]
    needs: str = ""

    def __post_init__(self):
        from simsci.data import KINDS

        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise ValueError(
                f"ModelEntry.name must be an identifier (e.g. 'latent_ode'), got {self.name!r}"
            )
        reads = (self.reads,) if isinstance(self.reads, str) else tuple(self.reads)
        unknown = [k for k in reads if k not in KINDS]
        if not reads or unknown:
            raise ValueError(
                f"ModelEntry({self.name!r}).reads must name trajectory kinds of "
                f"{list(KINDS)}, got {list(reads)}"
            )
        object.__setattr__(self, "reads", reads)
        if not isinstance(self.model, (type, str)):
            raise TypeError(
                f"ModelEntry({self.name!r}).model must be a class or 'module:qualname', got "
                f"{type(self.model).__name__}"
            )
        for key in ("build", "train", "load"):
            if not callable(getattr(self, key)):
                raise TypeError(f"ModelEntry({self.name!r}).{key} must be callable")

    @classmethod
    def of(cls, model) -> ModelEntry | None:
        """The entry of ``simsci.models.REGISTRY`` whose class is ``model``'s (a model or
        a class), None for a class the registry does not hold; classes registered by
        import path are matched by that path, without importing their package."""
        from simsci.models import REGISTRY

        klass = model if isinstance(model, type) else type(model)
        path = f"{klass.__module__}:{klass.__qualname__}"
        for e in REGISTRY.values():
            if e.model is klass or e.model == path:
                return e
        return None

    def check_data(self, traj) -> None:
        """Refuse data this model cannot read, before any work: a file whose kind is not
        in ``reads``, or one with none of the fields the model reads (besides ``t``). The
        ValueError names the kinds and fields the model needs, the file's kind and
        fields, and the registered models that read the file's kind. ``simsci train``
        and ``simsci evaluate`` both call it; ``traj`` is an opened ``Trajectories``."""
        fields = tuple(getattr(self.cls, "data_fields", ()) or ()) if self._imported else ()
        has = [*traj.step_fields, *traj.episode_fields]
        wrong_kind = traj.kind not in self.reads
        none_read = bool(fields) and not any(f in has for f in fields if f not in ("t",))
        if not (wrong_kind or none_read):
            return
        kinds = " or ".join(f"kind={k!r}" for k in self.reads)
        reads = f" (the fields it reads: {', '.join(fields)})" if fields else ""
        step = ", ".join(traj.step_fields) or "none"
        episode = ", ".join(traj.episode_fields) or "none"
        why = (
            f"this file is kind={traj.kind!r}"
            if wrong_kind
            else f"this kind={traj.kind!r} file has none of those fields besides t"
        )
        from simsci.models import REGISTRY

        others = [e.name for e in REGISTRY.values() if traj.kind in e.reads]
        hint = (
            f"models that read kind={traj.kind!r} files: {', '.join(others)}"
            if others
            else f"no registered model reads kind={traj.kind!r} files"
        )
        raise ValueError(
            f"{traj.path}: {self.name} ({self.model_name}) reads {kinds} files{reads}; {why} "
            f"(step fields: {step}; episode fields: {episode}). Give it a {kinds} file, "
            f"or use another model: {hint}"
        )

    @property
    def model_name(self) -> str:
        """The class name, without importing a class registered by import path."""
        if isinstance(self.model, type):
            return self.model.__name__
        return self.model.rpartition(":")[2].rpartition(".")[2]

    @property
    def _imported(self) -> bool:
        """Whether the class is at hand without importing a package (registered as a
        class, or its module already imported)."""
        import sys

        return isinstance(self.model, type) or self.model.partition(":")[0] in sys.modules

    @property
    def cls(self) -> type:
        """The model's class (imported on first use when registered by import path)."""
        if isinstance(self.model, type):
            return self.model
        module, _, qualname = self.model.partition(":")
        obj = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
        return obj


class ModelClasses(Mapping):
    """A read-only view of a registry as ``name -> class`` (``simsci.models.MODELS``)."""

    def __init__(self, registry: Mapping[str, ModelEntry]):
        self._registry = registry

    def __getitem__(self, name: str) -> type:
        return self._registry[name].cls

    def __iter__(self) -> Iterator[str]:
        return iter(self._registry)

    def __len__(self) -> int:
        return len(self._registry)

    def __repr__(self) -> str:
        return f"MODELS({', '.join(self._registry)})"


# ----------------------------------------------------------------- trajectory models
def trajectory_dataset(source, fields, *, split=None, window=None, stride=None):
    """A ``TrajectoryDataset`` over the fields of ``fields`` that the data has (step or
    episode fields, e.g. a series model's ``label``).

    ``source`` is a path or an opened ``Trajectories`` (opening checks every rule, so
    open a file once and pass it around). ``split`` is ignored (all episodes) when the
    data carries no split ids.
    """
    from simsci import data

    traj = source if isinstance(source, data.Trajectories) else data.open(source)
    present = tuple(f for f in fields if f in traj.step_fields or f in traj.episode_fields)
    if split is not None and "split" not in traj.episode_fields:
        split = None
    return data.TrajectoryDataset(traj, fields=present, split=split, window=window, stride=stride)


def trajectory_entry(name: str, cls: type, summary: str, reads) -> ModelEntry:
    """The entry of a model of the training contract that ``cls.from_data`` sizes from a
    trajectory file (``cls.data_fields``, ``cls.collate``; optional ``train_defaults``).

    ``build(data=None, **kwargs)``: ``cls(**kwargs)``, or with ``data`` (a path or an
    opened file) ``cls.from_data(data, **kwargs)`` (``window``, ``task`` and any
    constructor argument). ``train``: one :class:`simsci.train.Trainer` run (module
    :func:`_TrajectoryModel.train`). ``load``: :func:`simsci.train.load_model`.
    """
    model = _TrajectoryModel(name, cls)
    model.entry = ModelEntry(name, summary, reads, cls, model.build, model.train, _load_checkpoint)
    return model.entry


def _load_checkpoint(path, **kwargs):
    from simsci.train import load_model

    return load_model(path, **kwargs)


class _TrajectoryModel:
    """build / train of a :func:`trajectory_entry` (``simsci train`` on one file)."""

    def __init__(self, name: str, cls: type):
        self.name, self.cls = name, cls
        self.entry: ModelEntry | None = None  # set by trajectory_entry

    def build(self, data=None, **kwargs):
        if data is None:
            return self.cls(**kwargs)
        from simsci import data as sdata

        traj = data if isinstance(data, sdata.Trajectories) else sdata.open(data)
        return self.cls.from_data(traj, **kwargs)

    def train(
        self, data, out, config=None, *, val_data=None, window=None, stride=None, task=None,
        model_args=None, resume=False,
    ) -> dict:  # fmt: skip
        """One Trainer run: the model's ``train_defaults``, then ``config``; the file's
        train split (validation: ``val_data``, else its split 1); ``--resume`` continues
        ``out/checkpoints/last.pt``. Returns the Trainer's summary."""
        from simsci import data as sdata
        from simsci.train import TrainConfig, Trainer, seed_everything

        self._check_task(task)
        train_config = TrainConfig.from_dict(self._settings(config))
        # the one seeding point of the run: before data, the model's weights, the Trainer
        seed_everything(train_config.seed)
        out = Path(out)
        traj = sdata.open(data)
        self._check_data(traj, val_data)
        train_set, val_set = self._datasets(traj, val_data, window, stride)
        model = self._model(traj, out, window, task, model_args, resume)
        trainer = Trainer(
            model,
            train_config,
            train_set,
            val_set,
            out_dir=out,
            collate_fn=model.collate,
            resume=resume,
            extra={"window": window, "data": str(data)},
        )
        return trainer.fit()

    def _settings(self, config) -> dict:
        """The model's ``train_defaults``, then ``config``. A default evaluation or
        checkpoint interval (``val_every``, ``checkpoint_every``) longer than a
        ``max_steps`` that ``config`` sets is cut to it, so a short run still evaluates
        (and writes best.pt) once, at its end; intervals ``config`` sets are kept."""
        defaults = dict(getattr(self.cls, "train_defaults", {}))
        config = dict(config or {})
        steps = config.get("max_steps")
        if isinstance(steps, int) and not isinstance(steps, bool) and steps >= 1:
            for key in ("val_every", "checkpoint_every"):
                default = defaults.get(key)
                if key not in config and isinstance(default, int) and default > steps:
                    defaults[key] = steps
        return {**defaults, **config}

    def _check_data(self, traj, val_data) -> None:
        """Before the model is built: a file of a kind the model reads
        (:meth:`ModelEntry.check_data`), whose fields the model reads hold no inf and no
        NaN where observed (``simsci.data.check_finite``); the validation file too."""
        from simsci import data as sdata

        self._check_file(traj)
        if val_data is not None:
            val = sdata.open(val_data)
            try:
                self._check_file(val)
            finally:
                val.close()

    def _check_file(self, traj) -> None:
        from simsci import data as sdata

        if self.entry is not None:
            self.entry.check_data(traj)
        fields = getattr(self.cls, "data_fields", ())
        present = [f for f in fields if f in traj.step_fields or f in traj.episode_fields]
        if present:
            sdata.check_finite(traj, fields=present)

    def _check_task(self, task) -> None:
        from simsci.models._series import SeriesModel

        if task is not None and not issubclass(self.cls, SeriesModel):
            raise ValueError(
                "--task applies to the models of irregular series (the subclasses of "
                f"SeriesModel, e.g. latent_ode, gru_dt, latent_sde); {self.name!r} has no "
                "tasks: drop --task"
            )

    def _datasets(self, traj, val_data, window, stride):
        fields = self.cls.data_fields
        train_set = trajectory_dataset(traj, fields, split="train", window=window, stride=stride)
        val_set = None
        if val_data is not None:
            val_set = trajectory_dataset(val_data, fields, window=window, stride=stride)
        elif "split" in traj.episode_fields and (traj.column("split") == 1).any():
            val_set = trajectory_dataset(traj, fields, split="val", window=window, stride=stride)
        return train_set, val_set

    def _model(self, traj, out: Path, window, task, model_args, resume):
        from simsci.train import load_model

        if resume and (out / "checkpoints" / "last.pt").exists():
            model = load_model(out / "checkpoints" / "last.pt")
            recorded = getattr(model, "task", None)
            if task is not None and recorded is not None and task != recorded:
                raise ValueError(
                    f"--resume: the run in {out} trains task {recorded!r}, not --task "
                    f"{task!r}; drop --task or start a new run with another --out"
                )
            return model
        overrides = dict(model_args or {})
        if task is not None:
            overrides["task"] = task
        return self.cls.from_data(traj, window=window, **overrides)


# ------------------------------------------------------------------------- DynaDiff
#: the training settings DynaDiff's stages read (others of TrainConfig do not apply)
_DYNADIFF_CONFIG = ("max_steps", "batch_size", "lr", "device", "seed", "progress")
#: model arguments of `simsci train dynadiff` that are not DynaDiff constructor arguments
_DYNADIFF_STAGES = ("autoencoder_steps", "decoder_steps", "diffusion_train_steps")
#: constructor arguments that the zoo (or the config's seed) fixes
_DYNADIFF_FROM_ZOO = (
    "spec", "num_experts", "state_shape", "dt", "mean", "std", "system", "param_names",
    "param_range", "seed",
)  # fmt: skip


def dynadiff_entry() -> ModelEntry:
    """DynaDiff's generator (:class:`simsci.models.dynadiff.DynaDiff`).

    ``build(zoo=None, **kwargs)``: with ``zoo`` (a zoo file of ``simsci zoo build`` or a
    loaded ``Zoo``) an untrained generator for it, ``DynaDiff.from_zoo(zoo, **kwargs)``;
    without, ``DynaDiff(**kwargs)`` (all constructor arguments). ``train``: the zoo from
    ``model_args["zoo"]``, the data a multi-environment file or the folder of
    ``simsci dynadiff data`` (its ``train.h5``); writes ``out/generator.pt``.
    ``load``: that checkpoint, refused unless it holds a DynaDiff generator.
    """
    from simsci.models.dynadiff import DynaDiff

    return ModelEntry(
        "dynadiff",
        "DynaDiff: diffusion in a model zoo's weight space makes a predictor per new environment",
        ("state", "field"),
        DynaDiff,
        _build_dynadiff,
        _train_dynadiff,
        _load_dynadiff,
        needs="a model zoo: --param zoo=ZOO.pt",
    )


def _build_dynadiff(zoo=None, **kwargs):
    from simsci.models.dynadiff import DynaDiff, Zoo, load_zoo

    if zoo is None:
        return DynaDiff(**kwargs)
    return DynaDiff.from_zoo(zoo if isinstance(zoo, Zoo) else load_zoo(zoo), **kwargs)


def _load_dynadiff(path, **kwargs):
    from simsci.models.dynadiff import DynaDiff

    model = _load_checkpoint(path, **kwargs)
    if not isinstance(model, DynaDiff):
        raise ValueError(f"{path} holds a {type(model).__name__}, not a DynaDiff generator")
    return model


def _train_dynadiff(
    data, out, config=None, *, val_data=None, window=None, stride=None, task=None,
    model_args=None, resume=False,
) -> dict:  # fmt: skip
    """``simsci train dynadiff`` / ``simsci dynadiff train``: the generator's three stages
    (each resumes an interrupted run under ``out/<stage>``, with or without ``resume``),
    seeded first with ``seed`` (default 0)."""
    from simsci.models.dynadiff import train_generator
    from simsci.train import seed_everything

    kwargs = _dynadiff_spec(data, config, val_data, window, stride, task, model_args)
    # the one seeding point of the run: the generator's weights are drawn when it is built
    seed_everything(kwargs["seed"])
    train_generator(out_dir=out, **kwargs)
    return {"checkpoint": str(Path(out) / "generator.pt")}


def _dynadiff_spec(data, config, val_data, window, stride, task, model_args) -> dict:
    """Check the request and turn it into ``train_generator``'s arguments."""
    from simsci.models.dynadiff import PROTOCOLS, DynaDiff, load_zoo
    from simsci.train import TrainConfig

    for flag, value in (("--val-data", val_data), ("--window", window), ("--stride", stride),
                        ("--task", task)):  # fmt: skip
        if value is not None:
            raise ValueError(
                f"dynadiff trains on context windows of the training episodes of --data "
                f"(model arg context_steps) and takes no {flag}: drop {flag}"
            )
    config = dict(config or {})
    TrainConfig.from_dict(config)  # names and values of the training settings
    unused = sorted(k for k in config if k not in _DYNADIFF_CONFIG)
    if unused:
        raise ValueError(
            f"dynadiff trains in fixed-length stages and reads only {list(_DYNADIFF_CONFIG)} "
            f"of the training settings, not {unused}: drop them"
        )
    args = dict(model_args or {})
    ctor = [p for p in inspect.signature(DynaDiff).parameters if p not in _DYNADIFF_FROM_ZOO]
    valid = ["zoo", *_DYNADIFF_STAGES, *ctor]
    unknown = sorted(k for k in args if k not in valid)
    if unknown:
        raise ValueError(f"unknown --param for dynadiff: {unknown} (valid: {', '.join(valid)})")
    if args.get("zoo") is None:
        raise ValueError(
            "dynadiff trains on a model zoo: pass --param zoo=ZOO.pt (written by "
            "`simsci zoo build --data DATA --out ZOO.pt`)"
        )
    zoo = load_zoo(args.pop("zoo"))
    if args.get("context_steps") is None:
        protocol = PROTOCOLS.get(zoo.system)
        args["context_steps"] = protocol.context_steps if protocol is not None else 10
    args.setdefault("context_episodes", 1)
    steps = config.get("max_steps")
    stage_defaults = {"autoencoder_steps": 1500, "decoder_steps": None,
                      "diffusion_train_steps": 3000}  # fmt: skip
    for key, default in stage_defaults.items():
        args.setdefault(key, default if steps is None else steps)
    data = Path(data)
    if data.is_dir():
        data = data / "train.h5"
    settings = {k: config[k] for k in ("batch_size", "lr") if k in config}
    return dict(
        zoo=zoo,
        data=data,
        device=config.get("device", "auto"),
        seed=config.get("seed", 0),
        progress=config.get("progress", True),
        **settings,
        **args,
    )


# ---------------------------------------------------------------------- VectorWorld
_VECTORWORLD_STEPS = ("tile_steps", "vae_steps", "npc_steps")


def vectorworld_entry() -> ModelEntry:
    """VectorWorld (:class:`simsci.models.vectorworld.VectorWorld`), registered by import
    path: its package is imported when the entry is used, not with ``simsci.models``.

    ``build(checkpoint=None, *, device=None, **kwargs)``: ``checkpoint`` (a directory of
    ``simsci train vectorworld``) loaded, ``"small"`` the small model trained on the fly
    and cached (``small_default``, ``cache_dir`` / ``rebuild``); else the parts
    ``tiles``, ``vae``, ``npc`` (and ``meta``) put together; else the world shipped
    with simsci (``pretrained``). ``train``: the three parts on a scene
    file into the directory ``out``. ``load``: ``VectorWorld.load``.
    """
    return ModelEntry(
        "vectorworld",
        "VectorWorld: streaming driving world (tile generator, motion-gated VAE, ΔSim NPCs)",
        ("scene",),
        "simsci.models.vectorworld:VectorWorld",
        _build_vectorworld,
        _train_vectorworld,
        _load_vectorworld,
    )


def _build_vectorworld(checkpoint=None, *, device=None, **kwargs):
    from simsci.models.vectorworld import VectorWorld, resolve_world, small_default

    if isinstance(checkpoint, str) and checkpoint == "small":
        world = small_default(**kwargs)  # cache_dir, rebuild
        return world if device is None else world.to(device)
    if {"tiles", "vae", "npc"} & set(kwargs) and checkpoint is None:
        world = VectorWorld(**kwargs)
        return world if device is None else world.to(device)
    if kwargs and checkpoint is not None:
        raise TypeError(
            f"get('vectorworld', checkpoint=...) loads a trained world; it takes no "
            f"{sorted(kwargs)}"
        )
    if kwargs:
        raise TypeError(
            f"get('vectorworld') takes {sorted(kwargs)} only with checkpoint='small' "
            "(the small on-the-fly model) or with the parts tiles=, vae=, npc="
        )
    return resolve_world(checkpoint, device=device)  # a directory, or None: the shipped one


def _load_vectorworld(path, *, device=None):
    from simsci.models.vectorworld import VectorWorld

    return VectorWorld.load(path, device=device)


def _train_vectorworld(
    data, out, config=None, *, val_data=None, window=None, stride=None, task=None,
    model_args=None, resume=False,
) -> dict:  # fmt: skip
    """``simsci train vectorworld``: model args ``tile_steps``, ``vae_steps``,
    ``npc_steps``, ``npc_roads``, ``lane_repr`` (the tile generator's lane tokens),
    ``count_pins`` (counts as conditions), ``seam_frame`` (seam lanes in their seams'
    frames), ``tile_more_steps`` (a warm restart of the
    tile generator after the three parts);
    ``max_steps`` sets all three step counts (ΔSim's behaviour-cloning collection
    follows it), ``seed`` (default 0, seeding the whole run)
    and ``progress`` apply. VectorWorld's parts choose their own batches, learning rates
    and device, and read no validation file, window or task: the other settings are
    accepted and left unused, as ``simsci train vectorworld`` always did."""
    from simsci.models.vectorworld import train_vectorworld

    extra = dict(model_args or {})
    steps = {k: extra.pop(k) for k in _VECTORWORLD_STEPS if k in extra}
    config = dict(config or {})
    if config.get("max_steps") is not None:
        for k in _VECTORWORLD_STEPS:
            steps.setdefault(k, config["max_steps"])
    roads = extra.pop("npc_roads", 6)
    lane_repr = extra.pop("lane_repr", None)
    more = int(extra.pop("tile_more_steps", 0))
    flags = {}
    for name in ("count_pins", "seam_frame"):
        flags[name] = extra.pop(name, False)  # --param parses true / false to a bool
        if not isinstance(flags[name], bool):
            raise ValueError(f"--param {name} must be true or false, got {flags[name]!r}")
    if extra:
        raise ValueError(
            f"unknown --param for vectorworld: {sorted(extra)} (valid: tile_steps, "
            "vae_steps, npc_steps, npc_roads, lane_repr, count_pins, seam_frame, "
            "tile_more_steps)"
        )
    seed = config.get("seed")
    path = train_vectorworld(
        data,
        Path(out),
        **{k: int(v) for k, v in steps.items()},
        npc_roads=int(roads),
        lane_repr=None if lane_repr is None else str(lane_repr),
        **flags,
        tile_more_steps=more,
        seed=seed if seed is not None else 0,
        resume=resume,
        progress=config.get("progress", True),
    )
    return {"checkpoint": str(path)}
