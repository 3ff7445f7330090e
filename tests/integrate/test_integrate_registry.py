"""The method registries agree with what torchdiffeq and torchsde actually provide."""

import dataclasses

import pytest
import torchsde
from torchdiffeq._impl.odeint import SOLVERS
from torchsde._core import methods as sde_methods
from torchsde._core.base_sde import ForwardSDE

import simsci
from simsci.integrate import ODE_METHODS, SDE_METHODS, MethodInfo, compatible_sde_methods


def test_public_api_resolves():
    assert simsci.odeint is simsci.integrate.odeint
    assert simsci.sdeint is simsci.integrate.sdeint


@pytest.mark.parametrize("name", sorted(ODE_METHODS))
def test_ode_method_matches_torchdiffeq(name):
    info = ODE_METHODS[name]
    assert isinstance(info, MethodInfo) and info.name == name and info.description
    solver = SOLVERS[name]
    assert info.order == solver.order
    adaptive = hasattr(solver, "tableau")  # torchdiffeq's adaptive RK solvers
    assert info.adaptive == adaptive
    assert info.uses_tolerances == (adaptive or name == "implicit_adams")
    with pytest.raises(dataclasses.FrozenInstanceError):
        info.order = 1


class _Probe:
    def __init__(self, noise_type, sde_type):
        self.noise_type, self.sde_type = noise_type, sde_type

    def f(self, t, y):
        return y

    def g(self, t, y):
        return y if self.noise_type == "diagonal" else y[..., None]


@pytest.mark.parametrize("name", sorted(SDE_METHODS))
def test_sde_method_matches_torchsde(name):
    info = SDE_METHODS[name]
    for sde_type in ("ito", "stratonovich"):
        cls = sde_methods.select(method=name, sde_type=sde_type)
        assert (cls.sde_type == sde_type) == (sde_type in info.sde_types)
        if sde_type not in info.sde_types:
            continue
        assert set(cls.noise_types) == set(info.noise_types)
        assert set(cls.levy_area_approximations) == set(info.levy_areas)
        assert info.default_levy_area in info.levy_areas
        for noise in info.noise_types:
            # torchsde sets some strong orders per noise type in __init__: build one.
            bm = torchsde.BrownianInterval(
                t0=0.0, t1=1.0, size=(1, 1), levy_area_approximation=info.default_levy_area
            )
            solver = cls(
                sde=ForwardSDE(_Probe(noise, sde_type)), bm=bm, dt=0.1, adaptive=False,
                rtol=0.0, atol=0.0, dt_min=0.0, options={},
            )  # fmt: skip
            assert solver.strong_order == info.strong_order(noise), (name, noise)


def test_compatible_methods_and_strong_order_errors():
    assert compatible_sde_methods("general", "ito") == ["euler"]
    assert compatible_sde_methods("diagonal", "ito", adaptive=True) == ["milstein", "srk"]
    with pytest.raises(ValueError, match="does not support noise_type 'general'"):
        SDE_METHODS["srk"].strong_order("general")
