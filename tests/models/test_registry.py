"""The model registry (simsci.models.REGISTRY): every registered name builds with ``get``
(DynaDiff and VectorWorld included), MODELS is its name -> class view, entries load what
they train, unknown names and bad entries are clear errors."""

import pytest
import torch

from simsci import models, systems
from simsci.errors import UnknownNameError


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Tiny files of the kinds the trajectory models read: a state and a field file."""
    root = tmp_path_factory.mktemp("registry")
    state, field = root / "lorenz.h5", root / "heat.h5"
    systems.generate("lorenz63", 6, t_end=1.0, dt=0.1, out=state, seed=0, progress=False)
    heat = systems.get("heat", resolution=32)
    systems.generate(heat, 4, t_end=0.3, dt=0.1, out=field, seed=0, progress=False)
    return {"state": state, "field": field}


def tiny_zoo(num_experts=3):
    """A DynaDiff zoo of small MLP experts on 2-D states, built in memory."""
    from simsci.models.dynadiff import ExpertSpec, Zoo

    spec = ExpertSpec("mlp", 2, hidden=4, depth=2)
    shapes = spec.param_shapes()
    g = torch.Generator().manual_seed(0)
    record = {
        "spec": spec.to_dict(),
        "weights": {n: torch.randn(num_experts, *s, generator=g) for n, s in shapes.items()},
        "pooled": {n: torch.randn(1, *s, generator=g) for n, s in shapes.items()},
        "env_params": torch.linspace(0.5, 1.5, num_experts, dtype=torch.float64)[:, None],
        "param_names": ["beta"],
        "val_rmse": torch.ones(num_experts),
        "mean": torch.zeros(2),
        "std": torch.ones(2),
        "dt": 0.1,
        "system": "lotka_volterra",
        "kind_of_data": "state",
        "state_shape": [2],
    }
    return Zoo(record, "memory")


def vectorworld_parts():
    from simsci.models import vectorworld as vw

    return {
        "tiles": vw.TileGenerator(width=16, depth=1),
        "vae": vw.MotionGatedVAE(hidden=8, latent=4),
        "npc": vw.DeltaSim(hidden=8),
    }


def small(name, files):
    """The arguments of ``get`` that build a small model of every registered name (a new
    entry adds its row here)."""
    series = {"data": files["state"]}
    marks = {"num_marks": 3}
    table = {
        "latent_ode": {**series, "latent_dim": 2, "hidden_dim": 4},
        "sdevi": series,
        "gru_dt": series,
        "latent_sde": series,
        "linear_ode": series,
        "gfg": series,
        "operator": {"data": files["field"]},
        "controlled_ode": {"state_shape": [2], "action_dim": 1, "dt": 0.1},
        "cocld": marks,
        "poisson_tpp": marks,
        "rmtpp": marks,
        "nhp": marks,
        "thp": marks,
        "dynadiff": {"zoo": tiny_zoo(), "latent_dim": 4, "hidden": 16},
        "vectorworld": vectorworld_parts(),
    }
    return table[name]


@pytest.mark.parametrize("name", list(models.REGISTRY))
def test_every_registered_name_is_gettable(name, files):
    e = models.entry(name)
    assert e.name == name and e.summary and e.reads
    model = models.get(name, **small(name, files))
    assert isinstance(model, models.MODELS[name]) and models.MODELS[name] is e.cls


def test_dynadiff_and_vectorworld_are_registered():
    from simsci.models.dynadiff import DynaDiff
    from simsci.models.vectorworld import VectorWorld

    assert models.MODELS["dynadiff"] is DynaDiff
    assert models.MODELS["vectorworld"] is VectorWorld
    assert list(models.MODELS) == list(models.REGISTRY)
    assert models.entry("vectorworld").reads == ("scene",)
    assert set(models.entry("dynadiff").reads) == {"state", "field"}


def test_get_dynadiff_from_a_zoo_fills_its_buffers():
    zoo = tiny_zoo()
    gen = models.get("dynadiff", zoo=zoo, latent_dim=4, hidden=16)
    assert gen.init_args["num_experts"] == 3 and gen.init_args["param_names"] == ["beta"]
    assert gen.init_args["latent_dim"] == 4
    assert torch.equal(gen.env_params, zoo.env_params)
    again = models.get("dynadiff", **gen.init_args)  # the constructor, without a zoo
    assert again.init_args == gen.init_args


def test_entries_load_what_they_write(tmp_path):
    from simsci.train import save_model

    gen = models.get("dynadiff", zoo=tiny_zoo(), latent_dim=4, hidden=16)
    path = save_model(gen, tmp_path / "generator.pt")
    assert models.entry("dynadiff").load(path).init_args == gen.init_args
    other = save_model(models.get("poisson_tpp", num_marks=2), tmp_path / "p.pt")
    with pytest.raises(ValueError, match="holds a PoissonTPP, not a DynaDiff generator"):
        models.entry("dynadiff").load(other)
    assert type(models.entry("poisson_tpp").load(other)).__name__ == "PoissonTPP"

    world = models.get("vectorworld", **vectorworld_parts())
    world.save(tmp_path / "vw")
    loaded = models.entry("vectorworld").load(tmp_path / "vw")
    assert type(loaded) is type(world)
    assert type(models.get("vectorworld", checkpoint=tmp_path / "vw")) is type(world)
    with pytest.raises(TypeError, match="takes no"):
        models.get("vectorworld", checkpoint=tmp_path / "vw", **vectorworld_parts())


def test_unknown_names_are_the_house_error():
    for call in (lambda: models.get("latent_odee"), lambda: models.entry("latent_odee")):
        with pytest.raises(UnknownNameError, match="did you mean 'latent_ode'") as exc:
            call()
        assert "dynadiff" in str(exc.value) and "vectorworld" in str(exc.value)
    assert models.MODELS.get("latent_odee") is None


def test_register_and_bad_entries(monkeypatch):
    monkeypatch.setattr(models, "REGISTRY", dict(models.REGISTRY))
    lode = models.trajectory_entry("lode2", models.LatentODE, "a second latent ODE", "state")
    assert lode.reads == ("state",)
    assert models.register(lode) is lode and models.entry("lode2") is lode
    with pytest.raises(ValueError, match="already registered"):
        models.register(lode)
    models.register(lode, replace=True)
    with pytest.raises(TypeError, match="expects a ModelEntry"):
        models.register(models.LatentODE)
    with pytest.raises(ValueError, match="trajectory kinds"):
        models.trajectory_entry("x", models.LatentODE, "x", ("states",))
    with pytest.raises(ValueError, match="identifier"):
        models.trajectory_entry("a model", models.LatentODE, "x", ("state",))


# ----------------------------------------------------------------- linear_ode
def test_linear_ode_steps_exactly_and_resets_on_observations():
    """dz/dt = A z + b from the visible first point: the closed form z* + e^{At}(z0 - z*)
    with z* = -A^-1 b; a channel seen later replaces its entry of the state."""
    import numpy as np

    model = models.get("linear_ode", obs_dim=2, task="extrapolation")
    A = torch.tensor([[-0.5, 2.0], [-2.0, -0.5]])
    b = torch.tensor([1.0, 0.5])
    with torch.no_grad():
        model.A.copy_(A)
        model.b.copy_(b)
    t = np.array([0.0, 0.3, 1.0, 2.2, 3.0])
    x = np.array([[1.0, -1.0], [9.0, 9.0], [9.0, 9.0], [0.25, 9.0], [9.0, 9.0]])
    batch = model.collate([{"t": torch.as_tensor(t), "x": torch.as_tensor(x)}])
    visible = torch.zeros(1, 5, 2, dtype=torch.bool)
    visible[0, 0] = True  # the start
    visible[0, 3, 0] = True  # channel 0 alone at t = 2.2
    pred = model.predict_steps(batch, visible)[0].double()
    A, b = A.double(), b.double()
    rest = -torch.linalg.solve(A, b)

    def flow(z, dt):
        return rest + torch.linalg.matrix_exp(A * dt) @ (z - rest)

    z0 = torch.tensor([1.0, -1.0], dtype=torch.float64)
    want = [model.z0.detach().double()] + [flow(z0, s) for s in t[1:4]]
    reset = flow(z0, 2.2)
    reset[0] = 0.25
    want.append(flow(reset, 0.8))
    torch.testing.assert_close(pred, torch.stack(want), atol=1e-5, rtol=1e-5)


def test_linear_ode_learns_to_interpolate_and_trains_from_the_cli(tmp_path, capsys):
    """On irregular damped-pendulum series it starts as the last-value baseline (A = 0)
    and learns to beat it by far on held-out hidden points; `simsci train linear_ode`."""
    from simsci import data
    from simsci.cli import main

    path = systems.generate(
        "damped_pendulum", 32, t_end=4.0, dt=0.1, keep=0.5, out=tmp_path / "p.h5",
        seed=0, progress=False,
    )  # fmt: skip
    traj = data.open(path)
    train = list(data.TrajectoryDataset(traj, fields=("t", "x"), split="train"))
    held = list(data.TrajectoryDataset(traj, fields=("t", "x"), split="val"))
    held += list(data.TrajectoryDataset(traj, fields=("t", "x"), split="test"))
    model = models.get("linear_ode", data=path)
    held_batch = model.collate(held)
    model.eval()
    with torch.no_grad():
        before = model.validation_step(held_batch)
    assert torch.isclose(before["interp_mse"], before["locf_mse"])  # A = 0: the baseline
    gen = torch.Generator().manual_seed(0)
    opt = torch.optim.Adam(model.parameters(), lr=3e-2)
    model.train()
    losses = []
    for _ in range(120):
        pick = torch.randperm(len(train), generator=gen)[:16]
        loss = model.training_step(model.collate([train[int(i)] for i in pick]))["loss"]
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert sum(losses[-10:]) < 0.8 * sum(losses[:10])
    model.eval()
    with torch.no_grad():
        after = model.validation_step(held_batch)
    assert after["interp_mse"] < 0.5 * after["locf_mse"]
    assert after["interp_mse"] < after["mean_mse"]
    # the command line: the registry entry, one Trainer run, a checkpoint that loads
    run = tmp_path / "run"
    code = main(
        ["train", "linear_ode", "--data", str(path), "--out", str(run), "--max-steps", "3",
         "--batch-size", "4", "--no-progress", "--device", "cpu"]
    )  # fmt: skip
    assert code == 0, capsys.readouterr().err
    loaded = models.entry("linear_ode").load(run / "checkpoints" / "last.pt")
    assert isinstance(loaded, models.LinearODE) and loaded.obs_dim == 2
