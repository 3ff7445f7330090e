"""The grammar of the `simsci` command: one sub-parser per action with its own usage line
and help, one name per concept (the builders of simsci.cli._common), deprecated
spellings that still work and warn, --version, and a --help that imports nothing heavy.

Everything except the import-time check runs in-process on the parser (no subprocess,
no model, no data): seconds."""

import argparse
import json
import subprocess
import sys

import pytest

from simsci._version import __version__
from simsci.cli import build_parser, main
from simsci.cli._common import check_out

#: the commands whose every option must carry help text and follow the table of
#: simsci/cli/_common.py: every command
STRICT = {
    "generate", "data", "train", "evaluate", "events", "zoo", "dynadiff", "driving",
    "rollout", "env", "bench", "tour",
}  # fmt: skip

#: modules a --help must not import (each costs a second or more)
HEAVY = ("torch", "h5py", "gymnasium", "scipy", "simsci.models", "simsci.envs", "simsci.data")


def walk(parser, path=()):
    """``(path, parser)`` for the main parser and every sub-parser below it, once each
    (an alias names the same parser as its action)."""
    seen = set()

    def visit(p, where):
        if id(p) in seen:
            return
        seen.add(id(p))
        yield where, p
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    yield from visit(sub, (*where, name))

    yield from visit(parser, path)


def has_help_option(parser) -> bool:
    return any(isinstance(a, argparse._HelpAction) for a in parser._actions)


def help_text(capsys, argv) -> str:
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args([*argv, "--help"])
    assert exc.value.code == 0
    return capsys.readouterr().out


def test_every_command_and_action_has_its_own_usage_line(capsys):
    commands = list(walk(build_parser()))
    paths = {path for path, _ in commands}
    for group, actions in (
        ("events", ("predict", "generate")),
        ("zoo", ("build", "info")),
        ("dynadiff", ("data", "train", "adapt", "compare")),
        ("driving", ("roads", "metrics", "ppo", "eval")),
        ("env", ("list", "rollout")),
        ("bench", ("pde",)),
        ("data", ("info", "check", "import", "export-minari", "import-minari")),
        ("rollout", ("vectorworld",)),
    ):
        assert {(group, a) for a in actions} <= paths, group
    checked = 0
    for path, parser in commands:
        usage = " ".join(("usage: simsci", *path))
        if not has_help_option(parser):  # a benchmark script: --help goes to the script
            assert parser.format_usage().startswith(usage)
            continue
        text = help_text(capsys, path)
        first = text.splitlines()[0]
        assert first.startswith(usage), (path, first)
        # its own options, not its group's: the usage line names no sibling action
        checked += 1
    assert checked >= 25


def test_every_option_of_the_unified_commands_has_help():
    for path, parser in walk(build_parser()):
        if not path or path[0] not in STRICT or not has_help_option(parser):
            continue
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction) or action.help == argparse.SUPPRESS:
                continue
            assert action.help, (path, action.option_strings or action.dest)


def test_shared_options_have_one_spelling_and_one_default():
    """--device defaults to auto, --seed to 0, counts are -n/--episodes, and no action
    of the unified commands keeps an old spelling in its help."""
    old = {"--n", "--timesteps", "--steps", "--problem", "--option", "--hidden", "--val",
           "--model-arg", "--limit", "--tile-steps", "--no-shaping"}  # fmt: skip
    for path, parser in walk(build_parser()):
        if not path or path[0] not in STRICT:
            continue
        for action in parser._actions:
            names = set(action.option_strings)
            if action.help == argparse.SUPPRESS:  # a hidden deprecated spelling
                continue
            assert not names & old, (path, names)
            if "--device" in names:
                assert action.default == "auto", path
            if "--seed" in names:
                assert action.default == 0 and action.type is int, path
            if "--episodes" in names:
                assert "-n" in names, path


def test_version(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.strip() == f"simsci {__version__}"


@pytest.mark.parametrize(
    "argv, foreign",
    [
        (["events", "predict", "m.pt", "--data", "d.h5", "--out", "p.jsonl", "--t-end", "5"],
         "--t-end"),
        (["zoo", "info", "z.pt", "--seed", "1"], "--seed"),
        (["dynadiff", "adapt", "g.pt", "--context", "c.h5", "--out", "p.pt", "--zoo", "z.pt"],
         "--zoo"),
        (["driving", "metrics", "s.h5", "--num-envs", "4"], "--num-envs"),
        (["env", "list", "--episodes", "3"], "--episodes"),
        (["data", "info", "x.h5", "--seed", "1"], "--seed"),
        (["data", "check", "x.h5", "--compression", "gzip"], "--compression"),
    ],
)  # fmt: skip
def test_an_option_of_one_action_is_refused_by_another(argv, foreign, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2
    assert f"unrecognized arguments: {foreign}" in err
    # the error shows the action's own usage line, not the whole program's
    assert err.startswith(f"usage: simsci {argv[0]} {argv[1]}")


def test_options_after_the_action_parse_into_one_namespace():
    args = build_parser().parse_args(
        ["zoo", "build", "--data", "d", "--out", "z.pt", "--param", "hidden=8", "--seed", "3"]
    )
    assert args.zoo_action == "build" and args.max_steps == 1500 and args.pool_steps is None
    assert args.param == ["hidden=8"] and args.seed == 3 and args.device == "auto"
    assert args.out_kind == "file"


@pytest.mark.parametrize(
    "argv, attr, value, new",
    [
        (["generate", "lorenz63", "--n", "7", "--out", "x.h5"], "episodes", 7, "'--episodes'"),
        (["generate", "lorenz96", "--option", "dim=20", "--out", "x.h5"], "param",
         ["dim=20"], "'--param'"),
        (["generate", "lorenz63", "--split", "0.5,0.25,0.25", "--out", "x.h5"], "split",
         "0.5,0.25,0.25", "'--split-fractions'"),
        (["events", "generate", "m.pt", "--n", "3", "--out", "g.h5"], "episodes", 3,
         "'--episodes'"),
        (["zoo", "build", "--data", "d", "--out", "z.pt", "--steps", "20"], "max_steps", 20,
         "'--max-steps'"),
        (["zoo", "build", "--data", "d", "--out", "z.pt", "--hidden", "8"], "param",
         ["hidden=8"], "'--param hidden=8'"),
        (["zoo", "build", "--data", "d", "--out", "z.pt", "--val", "v.h5"], "val_data", "v.h5",
         "'--val-data'"),
        (["dynadiff", "train", "--zoo", "z", "--data", "d", "--out", "o",
          "--diffusion-steps", "10"], "param", ["diffusion_train_steps=10"],
         "'--param diffusion_train_steps=10'"),
        (["driving", "ppo", "--timesteps", "256", "--out", "o"], "max_steps", 256,
         "'--max-steps'"),
        (["driving", "eval", "--max-episode-steps", "30"], "param", ["max_episode_steps=30"],
         "'--param max_episode_steps=30'"),
        (["bench", "pde", "--problem", "heat"], "system", "heat", "'--system'"),
        (["bench", "pde", "--system", "heat", "--model", "a.pt", "--model", "b.pt"],
         "checkpoint", ["a.pt", "b.pt"], "'--checkpoint'"),
        (["train", "gfg", "--data", "d", "--model-arg", "variant=ambient"], "param",
         ["variant=ambient"], "'--param'"),
        (["data", "import", "pdebench", "a.h5", "b.h5", "--limit", "5"], "episodes", 5,
         "'--episodes'"),
        (["rollout", "vectorworld", "--tile-steps", "2"], "param", ["tile_steps=2"],
         "'--param tile_steps=2'"),
        (["rollout", "vectorworld", "--no-shaping"], "no_shaping", True,
         "'--param shaping=false'"),
    ],
)  # fmt: skip
def test_a_deprecated_spelling_still_works_and_warns(argv, attr, value, new, capsys):
    args = build_parser().parse_args(argv)
    assert getattr(args, attr) == value
    err = capsys.readouterr().err
    assert "simsci: DeprecationWarning:" in err and f"use {new}" in err
    assert "removed in the next release" in err


def test_model_arg_still_works_and_warns(capsys):
    """train --model-arg KEY=VALUE: the model's arguments as --param gives them, mixed
    with --param in order, and one warning naming --param."""
    from simsci.cli._train import train_request

    argv = ["train", "toy", "--data", "d.h5", "--out", "r", "--model-arg", "a=1",
            "--param", "b=[2,3]", "--model-arg", "c=x"]  # fmt: skip
    args = build_parser().parse_args(argv)
    assert args.param == ["a=1", "b=[2,3]", "c=x"]
    assert train_request(args)["model_args"] == {"a": 1, "b": [2, 3], "c": "x"}
    err = capsys.readouterr().err
    assert err.count("'--model-arg' is deprecated") == 2 and "use '--param'" in err


def test_train_seed_and_device_override_the_config_only_when_given(tmp_path):
    """--seed (default 0) and --device (default auto) show TrainConfig's defaults; a
    --config file's seed and device stay unless the flags are given."""
    from simsci.cli._train import train_request

    config = tmp_path / "c.json"
    config.write_text(json.dumps({"seed": 5, "device": "cpu"}))
    base = ["train", "toy", "--data", "d.h5", "--out", str(tmp_path / "r")]
    args = build_parser().parse_args(base)
    assert (args.seed, args.device) == (0, "auto")
    assert train_request(args)["config"] == {}
    args = build_parser().parse_args([*base, "--config", str(config)])
    assert train_request(args)["config"] == {"seed": 5, "device": "cpu"}
    args = build_parser().parse_args([*base, "--config", str(config), "--seed", "0",
                                      "--device", "auto"])  # fmt: skip
    assert train_request(args)["config"] == {"seed": 0, "device": "auto"}


def test_rollout_parameters_old_and_new_spellings(capsys):
    from simsci.cli._vectorworld import _apply_legacy, rollout_params

    def values(*argv):
        args = build_parser().parse_args(["rollout", *argv])
        _apply_legacy(args)
        return rollout_params(args)

    base = {"tile_steps": 1, "shaping": True, "complete": True, "tile_agents": "generator"}
    base["npc_yield"] = True
    assert values("vectorworld") == base
    new = values("vectorworld", "--param", "tile_steps=3", "--param", "shaping=false")
    assert new == {**base, "tile_steps": 3, "shaping": False}
    assert values("vectorworld", "--param", "tile_agents=vae")["tile_agents"] == "vae"
    assert values("vectorworld", "--param", "npc_yield=false")["npc_yield"] is False
    assert capsys.readouterr().err == ""
    assert values("vectorworld", "--tile-steps", "3", "--no-shaping") == new
    assert values("--tile-steps", "3", "--no-shaping", "vectorworld") == new
    assert "use 'simsci rollout vectorworld --param tile_steps=3'" in capsys.readouterr().err
    with pytest.raises(ValueError, match="unknown --param for rollout vectorworld"):
        values("vectorworld", "--param", "tiles=3")


def test_options_before_the_action_word_move_after_it_with_a_warning(capsys):
    from simsci.cli import options_before_action

    parser = build_parser()
    argv = ["events", "--device", "cpu", "--split", "all", "predict", "m.pt"]
    moved = options_before_action(parser, argv)
    assert moved == ["events", "predict", "--device", "cpu", "--split", "all", "m.pt"]
    err = capsys.readouterr().err
    assert "(options before the action) is deprecated" in err
    assert "use 'simsci events predict --device cpu --split all'" in err
    for same in (
        ["events", "predict", "m.pt", "--device", "cpu"],  # the new grammar
        ["events", "--help"],
        ["data", "--bogus", "info", "x.h5"],  # data always had sub-parsers
        ["--traceback", "zoo", "info", "z.pt"],
    ):
        assert options_before_action(parser, same) == same
    assert capsys.readouterr().err == ""


def test_deprecated_free_form_parameters_run_and_warn(tmp_path, capsys):
    out = tmp_path / "roads.json"
    code = main(["driving", "roads", "--count", "1", "--length", "1500", "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "'--length 1500' is deprecated" in captured.err
    assert "use '--param length=1500'" in captured.err
    assert json.loads(out.read_text())["roads"][0]["route_m"] >= 1500
    # the free-form --NAME VALUE of generate: converted, with the --param spelling named
    from simsci.cli._common import legacy_params
    from simsci.cli._generate import system_arguments

    values = legacy_params(["--rho", "35", "--nx", "64"], system_arguments, "simsci generate")
    assert values == {"rho": 35, "resolution": 64}
    assert "use '--param rho=35 --param resolution=64'" in capsys.readouterr().err


def test_out_rule_a_file_needs_its_folder_a_dir_is_created(tmp_path, capsys):
    args = build_parser().parse_args(
        ["events", "predict", "m.pt", "--data", "d", "--out", str(tmp_path / "no" / "p.jsonl")]
    )
    with pytest.raises(FileNotFoundError, match="does not exist"):
        check_out(args)
    code = main(["env", "rollout", "ODEControl", "--out", str(tmp_path / "missing" / "r.h5")])
    assert code == 2 and "does not exist" in capsys.readouterr().err
    args = build_parser().parse_args(
        ["dynadiff", "data", "--system", "lotka_volterra", "--out", str(tmp_path / "a" / "b")]
    )
    assert args.out_kind == "dir"
    check_out(args)  # a folder is the command's to create


@pytest.mark.parametrize("argv", [["--help"], ["events", "predict", "--help"], ["bench", "--help"]])
def test_help_imports_nothing_heavy(argv):
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "simsci", *argv],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("usage: simsci")
    imported = {
        line.rsplit("|", 1)[-1].strip()
        for line in proc.stderr.splitlines()
        if line.startswith("import time:")
    }
    heavy = sorted(m for m in imported if m in HEAVY or m.startswith(("torch.", "h5py.")))
    assert not heavy, f"simsci {' '.join(argv)} imports {heavy}"
