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
