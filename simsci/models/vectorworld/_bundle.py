"""A trained VectorWorld: its three parts in one directory, training them, a small default.

:class:`VectorWorld` holds the tile generator (:mod:`._outpaint`), the motion-aware
gated VAE (:mod:`._vae`) and the ΔSim NPC policy (:mod:`._npc`). On disk it is a
directory::

    vectorworld.json   {"format": "simsci.vectorworld", "format_version": 1,
                        "parts": {"tiles": "tiles.pt", "vae": "vae.pt", "npc": "npc.pt"},
                        "layout": ..., "data": ..., "simsci_version": ...}
    tiles.pt vae.pt npc.pt   simsci.train checkpoints (class path + init_args + weights)
    openings.npz             optional: openings made ahead for an opening bank (below)

Each part is an ordinary ``simsci.train`` checkpoint, so it carries its own config, and
:meth:`VectorWorld.load` checks that every file holds the part it is named for (a ΔSim
checkpoint given as the tile generator is an error naming both), and the format version.

**Openings made ahead.** A world with an ``opening_bank`` of K openings makes each the
first time an episode asks for it, about 0.25 s apiece on one CPU thread (a first tile
takes 16 flow steps and up to 8 draws), which is most of a short PPO run's reset cost.
:meth:`VectorWorld.make_openings` makes them once and the directory keeps them
(``openings.npz``, with the settings they were made under, ``vectorworld.json``'s
``openings``); a world whose settings match (:meth:`~._world.StreamingWorld.
opening_settings`: flow steps, seam completion and the version of its rules, device,
dtype and a fingerprint of the tile generator's weights) starts with them in its bank,
the very tiles it would have made. The shipped default holds 64.

:func:`train_vectorworld` trains the three parts on one scene file (``simsci train
vectorworld --data scenes.h5``): the tile generator and the VAE on the file's tiles,
ΔSim by behaviour cloning on ground-truth traffic on the roads the file was simulated
on (its ``road_seeds`` / ``route_length`` meta), each with ``simsci.train.Trainer`` in
its own sub-directory (so an interrupted run resumes part by part).

:func:`small_default` is the "pretrained on the fly" model ``simsci/VectorWorld-v1``
uses without a checkpoint: a few simulated drives and a few hundred steps per part on
tiny networks, cached on disk (``$SIMSCI_CACHE`` or ``~/.cache/simsci``) keyed by the
code version. It makes a working, fast world for tests and first steps; its maps and
traffic are far from the trained model's (see ``benchmarks/README.md`` for those).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import torch
from filelock import FileLock

__all__ = [
    "VectorWorld",
    "train_vectorworld",
    "small_default",
    "pretrained",
    "resolve_world",
    "FORMAT_VERSION",
]

FORMAT = "simsci.vectorworld"
FORMAT_VERSION = 1
_PARTS = ("tiles", "vae", "npc")
OPENINGS_FILE = "openings.npz"
_TILE_KEYS = ("points", "width", "speed_limit", "kind", "agents")


def _part_classes() -> dict:
    from simsci.models.vectorworld._npc import DeltaSim
    from simsci.models.vectorworld._outpaint import TileGenerator
    from simsci.models.vectorworld._vae import MotionGatedVAE

    return {"tiles": TileGenerator, "vae": MotionGatedVAE, "npc": DeltaSim}


class VectorWorld:
    """The three trained parts: ``tiles`` (TileGenerator), ``vae`` (MotionGatedVAE),
    ``npc`` (DeltaSim). ``world(n, **kw)`` starts a :class:`StreamingWorld`."""

    def __init__(self, tiles, vae, npc, *, meta: dict | None = None, openings=None):
        classes = _part_classes()
        for name, part in (("tiles", tiles), ("vae", vae), ("npc", npc)):
            if not isinstance(part, classes[name]):
                raise TypeError(
                    f"VectorWorld's {name!r} part must be a {classes[name].__name__}, got "
                    f"{type(part).__name__}"
                )
        self.tiles, self.vae, self.npc = tiles.eval(), vae.eval(), npc.eval()
        self.meta = dict(meta or {})
        # openings made ahead: {"settings": dict, "tiles": {key: opening}} (module docstring)
        self.openings = openings

    def make_openings(self, k: int, **world_kwargs) -> dict:
        """Make the openings of an ``opening_bank`` of ``k`` (those of a
        ``self.world(1, opening_bank=k, **world_kwargs)``) and keep them with the model;
        :meth:`save` writes them. Returns them."""
        from simsci.models.vectorworld._world import BANK_SEED

        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"k must be an int >= 1 (the bank's openings), got {k!r}")
        world = self.world(1, opening_bank=k, **world_kwargs)
        keys = [BANK_SEED + j for j in range(k)]
        made = dict(zip(keys, world.opening(keys)))
        self.openings = {"settings": world.opening_settings(), "tiles": made}
        return self.openings

    @property
    def device(self) -> torch.device:
        return next(self.tiles.parameters()).device

    def to(self, device) -> VectorWorld:
        for p in (self.tiles, self.vae, self.npc):
            p.to(device)
        return self

    def world(self, n: int = 1, **kwargs):
        from simsci.models.vectorworld._world import StreamingWorld

        return StreamingWorld(self, n, **kwargs)

    # ------------------------------------------------------------------ files
    def save(self, path) -> Path:
        """Write the directory (atomically: a temporary sibling renamed into place)."""
        from simsci import __version__
        from simsci.train import save_model

        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
        try:
            for name in _PARTS:
                save_model(getattr(self, name), tmp / f"{name}.pt")
            manifest = {
                "format": FORMAT,
                "format_version": FORMAT_VERSION,
                "parts": {name: f"{name}.pt" for name in _PARTS},
                "simsci_version": __version__,
                **{k: v for k, v in self.meta.items() if k not in ("format", "parts")},
            }
            if self.openings:
                _write_openings(tmp / OPENINGS_FILE, self.openings["tiles"])
                manifest["openings"] = {
                    "file": OPENINGS_FILE,
                    "settings": self.openings["settings"],
                    "count": len(self.openings["tiles"]),
                }
            (tmp / "vectorworld.json").write_text(json.dumps(manifest, indent=1))
            if path.exists():
                old = path.with_name(f".{path.name}.old")
                shutil.rmtree(old, ignore_errors=True)
                path.rename(old)
                tmp.rename(path)
                # the parts' training runs (train_vectorworld writes them under OUT/runs)
                # stay, so that a finished run can be resumed with more steps
                if (old / "runs").is_dir() and not (path / "runs").exists():
                    (old / "runs").rename(path / "runs")
                shutil.rmtree(old, ignore_errors=True)
            else:
                tmp.rename(path)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return path

    @classmethod
    def load(cls, path, *, device=None) -> VectorWorld:
        """Read a directory written by :meth:`save` / :func:`train_vectorworld`."""
        from simsci.train import load_model

        path = Path(path)
        manifest_path = path / "vectorworld.json"
        if not manifest_path.is_file():
            raise ValueError(
                f"{str(path)!r} is not a VectorWorld checkpoint directory (no vectorworld.json); "
                "write one with `simsci train vectorworld` or VectorWorld.save"
            )
        try:
            manifest = json.loads(manifest_path.read_text())
        except json.JSONDecodeError as e:
            raise ValueError(f"{manifest_path}: not valid JSON ({e})") from None
        if manifest.get("format") != FORMAT:
            raise ValueError(f"{manifest_path}: format {manifest.get('format')!r}, not {FORMAT!r}")
        if manifest.get("format_version") != FORMAT_VERSION:
            raise ValueError(
                f"{manifest_path}: format_version {manifest.get('format_version')!r}; this "
                f"simsci reads version {FORMAT_VERSION}: retrain with `simsci train vectorworld`"
            )
        classes = _part_classes()
        parts = {}
        for name in _PARTS:
            rel = manifest.get("parts", {}).get(name)
            if not rel or not (path / rel).is_file():
                raise ValueError(f"{path}: the {name!r} part ({rel!r}) is missing")
            model = load_model(path / rel, map_location=device or "cpu")
            if not isinstance(model, classes[name]):
                raise ValueError(
                    f"{path / rel}: holds a {type(model).__name__}, but the {name!r} part must "
                    f"be a {classes[name].__name__} (a checkpoint of another part?)"
                )
            parts[name] = model
        meta = {k: v for k, v in manifest.items() if k not in ("parts", "openings")}
        openings = None
        if manifest.get("openings"):
            entry = manifest["openings"]
            made = path / str(entry.get("file", OPENINGS_FILE))
            if not made.is_file():
                raise ValueError(f"{path}: the openings file {made.name!r} is missing")
            openings = {"settings": entry.get("settings"), "tiles": _read_openings(made)}
        return cls(parts["tiles"], parts["vae"], parts["npc"], meta=meta, openings=openings)

    def __repr__(self) -> str:
        return f"VectorWorld(layout={self.tiles.layout}, device={self.device})"


def _write_openings(path: Path, openings: dict) -> None:
    """Openings ``{key: [(cell, tile), ...]}`` as flat arrays: ``keys``, then per
    opening j and tile t ``j/t/cell``, the tile's ``_TILE_KEYS`` and, for the first
    tile, its initial vehicles ``j/0/traffic``."""
    import numpy as np

    arrays = {"keys": np.asarray(list(openings), np.int64)}
    for j, tiles in enumerate(openings.values()):
        for t, (cell, tile) in enumerate(tiles):
            arrays[f"{j}/{t}/cell"] = np.asarray(cell, np.int64)
            for name in (*_TILE_KEYS, "traffic"):
                if name in tile:  # "traffic": the first tile's initial vehicles
                    arrays[f"{j}/{t}/{name}"] = np.asarray(tile[name])
    with open(path, "wb") as f:
        np.savez_compressed(f, **arrays)


def _read_openings(path: Path) -> dict:
    import numpy as np

    try:
        with np.load(path, allow_pickle=False) as z:
            data = {name: z[name] for name in z.files}
        out = {}
        for j, key in enumerate(data["keys"].tolist()):
            tiles, t = [], 0
            while f"{j}/{t}/cell" in data:
                cell = tuple(int(v) for v in data[f"{j}/{t}/cell"])
                names = [*_TILE_KEYS, *(["traffic"] if f"{j}/{t}/traffic" in data else [])]
                tiles.append((cell, {name: data[f"{j}/{t}/{name}"] for name in names}))
                t += 1
            if not tiles:
                raise KeyError(f"{j}/0/cell")
            out[int(key)] = tiles
    except (OSError, ValueError, KeyError) as e:
        raise ValueError(f"{path}: not a readable openings file ({e})") from None
    return out


#: the one command that remakes the shipped default (Makefile target; its recipe has the
#: scene generation, the training and the shipping, with their seeds)
PRETRAINED_COMMAND = "make pretrained-vectorworld"


def pretrained(*, device=None) -> VectorWorld:
    """The VectorWorld shipped with simsci (``simsci/pretrained/vectorworld``, its files
    checked against the manifest's SHA-256): trained on CPU on 2,000 simulated drives;
    its training command, data seed and figures are in ``simsci/pretrained/manifest.json``
    and ``benchmarks/README.md``."""
    from simsci import pretrained as shipped

    return VectorWorld.load(shipped.path("vectorworld"), device=device)


def resolve_world(checkpoint=None, *, device=None) -> VectorWorld:
    """The world a user asked for: ``None`` the shipped default (:func:`pretrained`),
    ``"small"`` the small model trained on the fly (:func:`small_default`, for tests), a
    loaded :class:`VectorWorld` (or any object with ``tiles``, ``vae`` and ``npc``) as
    it is, else a directory written by ``simsci train vectorworld`` or :meth:`VectorWorld.save`."""
    if checkpoint is None:
        return pretrained(device=device)
    if isinstance(checkpoint, str) and checkpoint == "small":
        world = small_default()
        return world if device is None else world.to(device)
    if all(hasattr(checkpoint, part) for part in _PARTS):
        return checkpoint
    return VectorWorld.load(checkpoint, device=device)


def ship_default(
    model_dir, *, data_seed: int, train_seed: int, notes: str = "", openings: int = 64
) -> Path:
    """Copy the trained world in ``model_dir`` (its parts, not its training runs) into the
    package as the shipped default (``simsci.pretrained.ship``) and check that it loads.
    ``openings``: make (unless ``model_dir`` has them) and ship that many openings of an
    opening bank with default settings (module docstring); 0: none."""
    from simsci import pretrained as shipped

    model_dir = Path(model_dir)
    world = VectorWorld.load(model_dir)  # refuse to ship what does not load
    files = ["vectorworld.json", *(f"{name}.pt" for name in _PARTS)]
    if openings:  # the bank's openings made ahead (module docstring), kept in model_dir
        have = world.openings
        if not have or len(have["tiles"]) < openings or have["settings"] != _bank_settings(world):
            world.make_openings(int(openings))
            world.save(model_dir)
        files.append(OPENINGS_FILE)
    folder = shipped.ship(
        "vectorworld",
        model_dir,
        files,
        command=PRETRAINED_COMMAND,
        data_seed=data_seed,
        train_seed=train_seed,
        format=FORMAT,
        format_version=FORMAT_VERSION,
        notes=notes,
    )
    pretrained()
    return folder


def _bank_settings(world: VectorWorld) -> dict:
    """The opening settings of a default world of ``world`` on CPU."""
    return world.world(1, opening_bank=1).opening_settings()


def _best(run_dir: Path) -> Path:
    ckpt = run_dir / "checkpoints"
    for name in ("best.pt", "last.pt"):
        if (ckpt / name).is_file():
            return ckpt / name
    raise FileNotFoundError(f"no checkpoint under {ckpt}")


def _short_run(train, steps, kwargs) -> dict:
    """``kwargs`` of a part's ``train`` with its default ``val_every`` cut to ``steps``
    when longer (a run shorter than one interval evaluates once, at its end)."""
    import inspect

    kwargs = dict(kwargs or {})
    default = inspect.signature(train).parameters["val_every"].default
    if "val_every" not in kwargs and isinstance(default, int) and default > int(steps):
        kwargs["val_every"] = max(1, int(steps))
    return kwargs


def train_vectorworld(
    data,
    out,
    *,
    tile_steps: int = 2000,
    vae_steps: int = 1500,
    npc_steps: int = 1500,
    tiles_kwargs: dict | None = None,
    vae_kwargs: dict | None = None,
    npc_kwargs: dict | None = None,
    npc_roads: int = 6,
    lane_repr: str | None = None,
    count_pins: bool = False,
    seam_frame: bool = False,
    tile_more_steps: int = 0,
    tile_more_lr: float = 1.5e-4,
    seed: int = 0,
    resume: bool = False,
    progress: bool = False,
) -> Path:
    """Train the three parts on the scene file ``data``; writes the VectorWorld directory
    ``out`` (parts' training runs under ``out/runs/{tiles,vae,npc}``) and returns it.

    Seeded once, first (``simsci.train.seed_everything(seed)``): the same seed and file
    give the same world. The step counts are budgets every part keeps: an evaluation
    interval longer than a part's steps is cut to them (the part evaluates once, at its
    end), ΔSim's behaviour-cloning collection follows ``npc_steps``
    (:func:`._bc.collection_budget`), and every part ends with a best.pt, so a run of a
    few steps finishes in seconds with a loadable world. ``lane_repr``: the tile
    generator's lane tokens (:class:`~._tokens.TokenLayout`; ``"road"``: lane groups,
    :mod:`._lanegroups`); None keeps the generator's default. ``count_pins``: the
    generator samples each tile's lane and vehicle counts from the data's and is trained
    with them as conditions (:mod:`._outpaint`, "Counts as conditions"). ``seam_frame``:
    the generator writes a lane continuing a seam in that seam's frame, its width pinned
    to the lane it continues (:mod:`._tokens`, "Seam frames").
    ``tile_more_steps``: after the three parts, the tile generator trains that many
    steps more from its best checkpoint (a warm restart at ``tile_more_lr``, under
    ``out/runs/tiles_more``), and the world takes that generator."""
    from simsci import data as sdata
    from simsci.models.vectorworld._bc import train_delta_sim
    from simsci.models.vectorworld._outpaint import train_tile_generator
    from simsci.models.vectorworld._tokens import check_scene_layout
    from simsci.models.vectorworld._vae import train_vae
    from simsci.train import load_model, seed_everything

    seed = seed_everything(seed)
    tiles_kwargs = _short_run(train_tile_generator, tile_steps, tiles_kwargs)
    args = dict(tiles_kwargs.get("model_args") or {})
    if lane_repr is not None:
        args["lane_repr"] = str(lane_repr)
    flags = {k: True for k, on in (("count_pins", count_pins), ("seam_frame", seam_frame)) if on}
    if flags:
        from simsci.models.vectorworld._tokens import GENERATOR_LAYOUT

        args["layout"] = {**(args.get("layout") or GENERATOR_LAYOUT.to_dict()), **flags}
    if args:
        tiles_kwargs["model_args"] = args
    vae_kwargs = _short_run(train_vae, vae_steps, vae_kwargs)
    out = Path(out)
    runs = out / "runs"
    ds = sdata.open(data)
    try:
        check_scene_layout(ds)
        meta = dict(ds.meta)
    finally:
        ds.close()
    train_tile_generator(
        data,
        runs / "tiles",
        steps=int(tile_steps),
        seed=seed,
        resume=resume,
        progress=progress,
        **(tiles_kwargs or {}),
    )
    train_vae(
        data,
        runs / "vae",
        steps=int(vae_steps),
        seed=seed,
        resume=resume,
        progress=progress,
        **(vae_kwargs or {}),
    )
    # ΔSim clones the ground-truth traffic on the roads the file was simulated on (the
    # first npc_roads of them train, the next two validate)
    seeds = [int(s) for s in (meta.get("road_seeds") or [seed, seed + 1, seed + 2])]
    k = max(1, min(int(npc_roads), len(seeds) - 1))
    length = float(meta.get("route_length") or 3000.0)
    train_delta_sim(
        runs / "npc",
        road_seeds=seeds[:k],
        val_road_seeds=seeds[k : k + 2] or seeds[:1],
        road_length=(length, length),
        max_steps=int(npc_steps),
        seed=seed,
        resume=resume,
        progress=progress,
        **(npc_kwargs or {}),
    )
    info = {"data": os.fspath(data), "seed": int(seed), "steps": [tile_steps, vae_steps, npc_steps]}
    tiles_run = runs / "tiles"
    if tile_more_steps:
        # a warm restart of the tile generator (fresh optimiser, warm-up and cosine over
        # the new steps): the first schedule's cosine has decayed to zero while the
        # validation error still falls (benchmarks/README.md, seventh session)
        seed_everything(seed)
        train_tile_generator(
            data,
            runs / "tiles_more",
            steps=int(tile_more_steps),
            seed=seed,
            lr=float(tile_more_lr),
            warmup_steps=50,
            init_from=_best(tiles_run),
            resume=resume,
            progress=progress,
        )
        tiles_run = runs / "tiles_more"
        info["tile_more"] = {"steps": int(tile_more_steps), "lr": float(tile_more_lr)}
    parts = [load_model(_best(tiles_run))] + [load_model(_best(runs / n)) for n in _PARTS[1:]]
    return VectorWorld(*parts, meta=info).save(out)


_SMALL_VERSION = 1


def _source_hash() -> str:
    """A hash of the code that makes the small model (a change retrains it)."""
    import hashlib
    import inspect

    from simsci.driving import AgentState, LaneSet

    here = Path(__file__).resolve().parent
    h = hashlib.sha256()
    names = ("_bundle.py", "_dit.py", "_tokens.py", "_outpaint.py", "_vae.py", "_npc.py")
    names += ("_checks.py", "_features.py", "_bc.py")
    for name in names:
        h.update((here / name).read_bytes())
    for contract in (LaneSet, AgentState):  # ΔSim's inputs, defined in simsci.driving
        h.update(Path(inspect.getsourcefile(contract)).read_bytes())
    return h.hexdigest()[:12]


def _cache_root() -> Path:
    root = os.environ.get("SIMSCI_CACHE")
    return Path(root) if root else Path.home() / ".cache" / "simsci"


def small_default(*, cache_dir=None, rebuild: bool = False) -> VectorWorld:
    """The small VectorWorld trained on the fly (module docstring); built once per code
    version and cached under ``cache_dir`` (default ``$SIMSCI_CACHE`` or ``~/.cache/simsci``)."""
    root = Path(cache_dir) if cache_dir is not None else _cache_root()
    key = f"vectorworld-small-v{_SMALL_VERSION}-{_source_hash()}"
    path = root / key
    if not rebuild and (path / "vectorworld.json").is_file():
        return VectorWorld.load(path)
    root.mkdir(parents=True, exist_ok=True)
    # one builder at a time (two processes, or pytest-xdist workers); the others wait,
    # then load what it built. It trains in a work folder and renames the finished
    # model into place, so the cache key's folder is complete whenever it exists.
    with FileLock(os.fspath(root / f".{key}.lock")):
        if not rebuild and (path / "vectorworld.json").is_file():
            return VectorWorld.load(path)
        _build_small(root / f".{key}.work", path)
    return VectorWorld.load(path)


def _build_small(work: Path, path: Path) -> None:
    """Make the small default's scenes and train it in ``work``, then rename it to
    ``path`` (a killed build resumes from the parts' checkpoints in ``work``)."""
    from simsci.driving import make_scenes

    work.mkdir(parents=True, exist_ok=True)
    scenes = work / "scenes.h5"
    if not scenes.is_file():
        tmp = work / "scenes.tmp.h5"
        tmp.unlink(missing_ok=True)
        make_scenes(8, out=tmp, seed=0, drive_length=300.0, route_length=1000.0)
        tmp.rename(scenes)
    model = work / "model"
    with torch.random.fork_rng():
        torch.manual_seed(0)
        train_vectorworld(
            scenes,
            model,
            tile_steps=100,
            vae_steps=100,
            npc_steps=100,
            tiles_kwargs={
                "model_args": {"width": 32, "depth": 1, "heads": 2, "freq_dim": 16},
                "batch_size": 8,
                "val_every": 100,
                "max_val_items": 32,
                "warmup_steps": 10,
            },
            vae_kwargs={
                "model_args": {"hidden": 32, "latent": 8},
                "batch_size": 16,
                "val_every": 100,
            },
            npc_kwargs={"hidden": 32, "depth": 2, "n_scenes": 6, "steps": 60, "val_steps": 30},
            npc_roads=1,
            resume=(model / "runs").is_dir(),
        )
    shutil.rmtree(model / "runs", ignore_errors=True)  # training state, not the model
    shutil.rmtree(path, ignore_errors=True)  # rebuild=True
    model.rename(path)
    shutil.rmtree(work, ignore_errors=True)
