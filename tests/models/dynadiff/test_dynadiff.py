"""DynaDiff end to end on the quick Lotka-Volterra protocol: experts, the vmapped zoo,
the zoo file, the generator, deployment as a checkpoint, and the bad inputs."""

import math
import warnings

import gymnasium
import numpy as np
import pytest
import torch

import simsci.envs  # noqa: F401  (registers the simsci/ environments with gymnasium)
from simsci.errors import CheckpointError
from simsci.models import dynadiff as dd
from simsci.models.dynadiff._experts import flatten_params, unflatten_params
from simsci.models.dynadiff._zoo import save_zoo
from simsci.train import load_model, save_model


@pytest.fixture(scope="module")
def lv(tmp_path_factory):
    """Quick LV data, a zoo and a small trained generator (built once)."""
    root = tmp_path_factory.mktemp("dynadiff")
    paths = dd.make_environments("lotka_volterra", root / "data", quick=True, device="cpu")
    spec = dd.ExpertSpec("mlp", 2, hidden=16, depth=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        zoo_path = dd.build_zoo(
            root / "data", root / "zoo.pt", spec=spec, steps=400, pool_steps=150,
            batch_size=8, lr=1e-2, device="cpu",
        )  # fmt: skip
        zoo = dd.load_zoo(zoo_path)
        gen = dd.train_generator(
            zoo, paths["train"], root / "gen", autoencoder_steps=40,
            diffusion_train_steps=150, batch_size=16, context_steps=10, device="cpu",
            latent_dim=8, hidden=64, candidates=8, sample_steps=10,
        )  # fmt: skip
    return {"root": root, "paths": paths, "zoo_path": zoo_path, "zoo": zoo, "gen": gen}


def test_expert_spec_shapes_and_flat_round_trip():
    spec = dd.ExpertSpec("conv", 2, hidden=4, depth=3, kernel=3)
    assert spec.layer_shapes()[0] == ((4, 2, 3, 3), (4,))
    net = dd.ExpertNet(spec)
    params = dict(net.named_parameters())
    flat = flatten_params(params, spec)
    assert flat.shape == (spec.num_params,)
    back = unflatten_params(flat, spec)
    assert all(torch.equal(back[k], params[k]) for k in params)
    with pytest.raises(ValueError, match="entries"):
        unflatten_params(flat[:-1], spec)
    with pytest.raises(ValueError, match="kind"):
        dd.ExpertSpec("rnn", 2)
    with pytest.raises(ValueError, match="depth"):
        dd.ExpertSpec("mlp", 2, depth=1)


def test_conv_expert_is_translation_equivariant_on_the_torus():
    torch.manual_seed(0)
    net = dd.ExpertNet(dd.ExpertSpec("conv", 2, hidden=4, depth=3))
    x = torch.randn(3, 8, 8, 2)
    shifted = net.step(torch.roll(x, shifts=(2, -3), dims=(1, 2)))
    assert torch.allclose(shifted, torch.roll(net.step(x), shifts=(2, -3), dims=(1, 2)), atol=1e-6)


def test_vmapped_zoo_equals_one_at_a_time(tmp_path, lv):
    spec = dd.ExpertSpec("mlp", 2, hidden=8, depth=3)
    kw = dict(spec=spec, steps=20, pool_steps=10, batch_size=4, device="cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = dd.load_zoo(dd.build_zoo(lv["root"] / "data", tmp_path / "a.pt", **kw))
        b = dd.load_zoo(dd.build_zoo(lv["root"] / "data", tmp_path / "b.pt", vmapped=False, **kw))
    for name in spec.param_names():
        assert torch.allclose(a.weights[name], b.weights[name], rtol=1e-4, atol=1e-6), name
    assert a.num_experts == 9 and a.varied() == ["beta", "delta"]


def test_experts_specialise_beyond_the_pooled_model(lv):
    zoo = lv["zoo"]
    val = dd.load_environments(lv["paths"]["val"])
    pooled = dd.Predictor(zoo.spec.to_dict(), zoo.mean.tolist(), zoo.std.tolist(), zoo.dt)
    pooled.net.load_state_dict({k: v[0] for k, v in zoo.pooled.items()})
    from simsci.models.dynadiff._predictor import rollout_errors

    pooled_rmse = []
    for row in zoo.env_params.numpy():
        hit = np.flatnonzero(np.all(np.isclose(val.params, row), axis=1))[0]
        pooled_rmse.append(rollout_errors(pooled, val.episodes[hit])["rmse"])
    # each expert beats the one model of all environments on its own environment
    assert float(zoo.val_rmse.mean()) < float(np.mean(pooled_rmse))


def test_zoo_file_errors(tmp_path, lv):
    bad = tmp_path / "truncated.pt"
    bad.write_bytes(lv["zoo_path"].read_bytes()[:500])
    with pytest.raises(CheckpointError, match="not a readable zoo"):
        dd.load_zoo(bad)
    foreign = tmp_path / "foreign.pt"
    torch.save({"kind": "something"}, foreign)
    with pytest.raises(CheckpointError, match="not a DynaDiff zoo"):
        dd.load_zoo(foreign)
    record = dict(lv["zoo"].record)
    record["weights"] = {**record["weights"], "layers.0.weight": torch.zeros(9, 3, 3)}
    save_zoo(
        tmp_path / "edited.pt",
        {k: v for k, v in record.items() if k not in ("kind", "format_version")},
    )
    with pytest.raises(CheckpointError, match="corrupt or was edited"):
        dd.load_zoo(tmp_path / "edited.pt")
    with pytest.raises(FileNotFoundError, match="zoo build"):
        dd.load_zoo(tmp_path / "missing.pt")


def test_generator_makes_predictors_close_to_the_experts(lv):
    gen, zoo = lv["gen"], lv["zoo"]
    train = dd._pipeline.zoo_order(zoo, dd.load_environments(lv["paths"]["train"])).subset("train")
    avg = dd.Predictor(zoo.spec.to_dict(), zoo.mean.tolist(), zoo.std.tolist(), zoo.dt)
    avg.net.load_state_dict({k: v.mean(0) for k, v in zoo.weights.items()})
    from simsci.models.dynadiff._predictor import rollout_errors

    gen_err, avg_err = [], []
    for e in range(zoo.num_experts):
        x = train.episodes[e]
        model, info = gen.generate(x[:1, :10])
        assert len(info["context_mse"]) == 8 and 0 <= info["chosen"] < 8
        gen_err.append(rollout_errors(model, x[1:])["rmse"])
        avg_err.append(rollout_errors(avg, x[1:])["rmse"])
    # the generated predictors are environment-specific: better than the zoo's mean weights
    assert np.mean(gen_err) < np.mean(avg_err)


def test_generation_is_deterministic_given_the_seed(lv):
    x = dd.load_environments(lv["paths"]["in_domain"]).episodes[0][:1, :10]
    a, _ = lv["gen"].generate(x, seed=3)
    b, _ = lv["gen"].generate(x, seed=3)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


def test_guidance_pulls_the_samples_towards_the_context(lv):
    """Guided sampling lowers the context error of the candidates it returns, and stays
    deterministic given the seed."""
    gen = lv["gen"]
    env = dd.load_environments(lv["paths"]["in_domain"])
    plain, guided = [], []
    for x in env.episodes:
        ctx = x[:1, :10]
        _, info0 = gen.generate(ctx, seed=1, guidance=0.0)
        _, info1 = gen.generate(ctx, seed=1, guidance=0.5)
        plain.append(np.median(info0["context_mse"]))
        guided.append(np.median(info1["context_mse"]))
    assert np.mean(guided) < 0.9 * np.mean(plain)
    x = env.episodes[0][:1, :10]
    a, _ = gen.generate(x, seed=3, guidance=0.5)
    b, _ = gen.generate(x, seed=3, guidance=0.5)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    # the context loss it descends is differentiable in the latent
    z = gen.latents[:3].clone().requires_grad_(True)
    wins = dd._baselines.context_windows(gen._normalise_state(x.float()), gen.window)
    gen.context_fit(z, wins).sum().backward()
    assert z.grad.shape == z.shape and torch.isfinite(z.grad).all() and z.grad.abs().sum() > 0


def test_adapt_writes_a_checkpoint_that_simsci_loads(tmp_path, lv):
    gen_path = lv["root"] / "gen" / "generator.pt"
    out, info = dd.adapt(gen_path, lv["paths"]["in_domain"], tmp_path / "pred.pt")
    model = load_model(out)
    assert isinstance(model, dd.Predictor) and model.init_args["source"] == "dynadiff"
    metrics = model.evaluate_file(lv["paths"]["in_domain"], split="all")
    assert math.isfinite(metrics["rmse"]) and metrics["frames"] == 21
    x = torch.tensor([[2.0, 1.0]])
    assert torch.allclose(model.advance(x, None, 2 * model.dt), model(model(x)))
    # the predictor stands in for the system's dynamics in the surrogate environment
    env = gymnasium.make("simsci/Surrogate-v0", checkpoint=str(out))
    obs, _ = env.reset(seed=0)
    obs2, *_ = env.step(env.action_space.sample())
    assert obs.shape == obs2.shape == (2,)
    env.close()


def test_bad_inputs(tmp_path, lv):
    gen = lv["gen"]
    x = dd.load_environments(lv["paths"]["in_domain"]).episodes[0]
    with pytest.raises(ValueError, match="too short for the prompter"):
        gen.generate(x[:1, :4])
    with pytest.raises(ValueError, match="non-finite"):
        gen.generate(torch.full((1, 10, 2), float("nan")))
    with pytest.raises(ValueError, match=r"\(K, \*S\)"):
        gen.generate(torch.zeros(1, 10, 3))
    # a zoo of another architecture
    other = dd.ExpertSpec("mlp", 2, hidden=12, depth=3)
    rec = dict(lv["zoo"].record)
    net = dd.ExpertNet(other)
    E = lv["zoo"].num_experts
    rec["spec"] = other.to_dict()
    rec["weights"] = {k: v.detach().expand(E, *v.shape).clone() for k, v in net.named_parameters()}
    rec["pooled"] = {k: v.detach()[None].clone() for k, v in net.named_parameters()}
    save_zoo(
        tmp_path / "other.pt", {k: v for k, v in rec.items() if k not in ("kind", "format_version")}
    )
    with pytest.raises(ValueError, match="architecture"):
        gen.check_zoo(dd.load_zoo(tmp_path / "other.pt"))
    # an environment outside the zoo's range: works, with a warning
    with pytest.warns(UserWarning, match="extrapolates"):
        path, _ = dd.adapt(gen, lv["paths"]["out_of_domain"], tmp_path / "ood.pt")
    assert path.is_file()
    # a context file with too few frames
    short = tmp_path / "short.h5"
    from simsci import systems

    systems.generate("lotka_volterra", 1, out=short, t_end=2.0, dt=0.5, progress=False)
    with pytest.raises(ValueError, match="too short"):
        dd.adapt(gen, short, tmp_path / "x.pt")


def test_baselines_run_in_the_same_harness(lv):
    zoo = lv["zoo"]
    coda = dd.train_baselines(
        zoo, lv["paths"]["train"], lv["root"] / "base", coda_steps=20, device="cpu"
    )
    res = dd.compare_methods(
        lv["gen"], zoo, lv["paths"]["in_domain"], coda=coda, finetune_steps=5, coda_steps=5
    )
    assert set(res["summary"]) == set(dd.METHODS)
    assert all(math.isfinite(v["rmse"]) for v in res["summary"].values())
    assert len(res["environments"]) == 2
    # the sweep picks each method's best setting among those it tried
    tuned = dd.tune_methods(
        lv["gen"], zoo, lv["paths"]["in_domain"], coda=coda, finetune_steps=3, coda_steps=3,
        rates={"finetune": (1e-3, 1e-2), "coda": (1e-2, 1e-1)},
        guidance=((0.1, 0), (1.0, 3)), max_envs=2,
    )  # fmt: skip
    grids = {"finetune": {1e-3, 1e-2}, "coda": {1e-2, 1e-1}, "dynadiff_guided": {"0.1/0", "1/3"}}
    for name, values in grids.items():
        sweep = tuned["sweep"][name]
        assert set(sweep) == values
        key = f"{tuned['guidance']:g}/{tuned['polish_steps']}" if "guided" in name else tuned[name]
        assert sweep[key] == min(sweep.values())
    # a checkpoint of a generator rebuilds it
    save_model(lv["gen"], lv["root"] / "g2.pt")
    again = load_model(lv["root"] / "g2.pt")
    assert torch.equal(again.latents, lv["gen"].latents)


def test_pipeline_runs_on_the_device(tmp_path, device, lv):
    """Zoo training, generator training and generation keep their tensors on ``device``."""
    spec = dd.ExpertSpec("mlp", 2, hidden=8, depth=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        zoo = dd.load_zoo(
            dd.build_zoo(
                lv["root"] / "data",
                tmp_path / "z.pt",
                spec=spec,
                steps=5,
                pool_steps=5,
                device=device.type,
            )  # fmt: skip
        )
        gen = dd.train_generator(
            zoo, lv["paths"]["train"], tmp_path / "g", autoencoder_steps=3,
            diffusion_train_steps=3, context_steps=10, device=device.type, latent_dim=4,
            hidden=16,
        )  # fmt: skip
    gen = gen.to(device)
    x = dd.load_environments(lv["paths"]["in_domain"]).episodes[0][:1, :10].to(device)
    model, info = gen.generate(x, candidates=3, guidance=0.5)
    assert len(info["context_mse"]) == 3
    out = model.to(device).rollout(x[:, 0], 5)
    assert out.device.type == device.type and torch.isfinite(out).all()


def test_fno_expert_is_equivariant_and_fits_the_weight_graph():
    torch.manual_seed(0)
    spec = dd.ExpertSpec("fno", 1, hidden=4, depth=4, modes=2)
    net = dd.ExpertNet(spec)
    x = torch.randn(2, 8, 8, 1)
    y = net.step(x)
    assert torch.allclose(
        net.step(torch.roll(x, (3, 1), (1, 2))), torch.roll(y, (3, 1), (1, 2)), atol=1e-5
    )
    stacked = {k: v.detach()[None].expand(3, *v.shape) for k, v in net.named_parameters()}
    layers = spec.graph_layers(stacked)
    assert all(w.shape[-1] == spec.edge_dim() for w, _ in layers)
    enc = dd.WeightGraphEncoder(spec.edge_dim(), hidden=8, latent_dim=4)
    assert enc(dd.stacked_weights_to_batch(layers)).shape == (3, 4)
    # decoded weights are slices of one flat vector: the Fourier layer runs on them under vmap
    flat = flatten_params({k: v.detach() for k, v in net.named_parameters()}, spec)
    params = unflatten_params(torch.stack([flat, flat]), spec)
    out = torch.func.vmap(lambda p, z: torch.func.functional_call(net, p, (z,)))(
        params, torch.stack([x, x])
    )
    assert torch.allclose(out[1], net(x), atol=1e-6)
    with pytest.raises(ValueError, match="Fourier modes do not fit"):
        net.step(torch.randn(1, 2, 2, 1))
