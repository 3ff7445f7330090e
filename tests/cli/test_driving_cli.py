"""The driving world from the command line: roads, generate driving -> metrics, eval and
ppo in simsci/Driving-v0 (tiny sizes), and bad input refused with one clear line."""

import json

import h5py
import pytest

from simsci.cli import main


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_roads_generate_and_metrics(tmp_path, capsys):
    code, out, err = run(capsys, "driving", "roads", "-n", 2, "--param", "length=2000")
    assert code == 0, err
    roads = json.loads(out)["roads"]
    assert len(roads) == 2 and all(r["route_m"] >= 2000 for r in roads)
    scenes = tmp_path / "scenes.h5"
    code, out, err = run(capsys, "generate", "driving", "-n", 3, "--out", scenes,
                         "--param", "drive_length=200", "--param", "route_length=1500",
                         "--param", "episodes_per_road=3")  # fmt: skip
    assert code == 0, err
    code, out, err = run(capsys, "driving", "metrics", scenes, "--out", tmp_path / "m.json")
    assert code == 0, err
    m = json.loads(out)
    assert m["episodes"] == 3 and m["tiles"] >= 6
    assert m["collision_rate"] == 0.0 and m["infeasible_step_rate"] == 0.0
    assert m["seam_gap_median_m"] < 1e-6
    assert json.loads((tmp_path / "m.json").read_text()) == m


def test_eval_and_ppo(tmp_path, capsys):
    env = ["--param", "max_episode_steps=30", "--param", "route_length=1500", "--num-envs", 4,
           "--device", "cpu"]  # fmt: skip
    code, out, err = run(capsys, "driving", "eval", "lane-keeping", "--episodes", 4, *env)
    assert code == 0, err
    res = json.loads(out)
    assert res["episodes"] == 4 and res["collision"] == 0.0 and res["mean_distance"] > 30
    pytest.importorskip("stable_baselines3")
    code, out, err = run(capsys, "driving", "ppo", "--max-steps", 256, "--episodes", 4,
                         "--out", tmp_path / "ppo", *env)  # fmt: skip
    assert code == 0, err
    res = json.loads(out)
    assert (tmp_path / "ppo" / "ppo.zip").is_file() and res["ppo"]["episodes"] == 4
    code, out, err = run(capsys, "driving", "eval", tmp_path / "ppo" / "ppo.zip",
                         "--episodes", 4, *env)  # fmt: skip
    assert code == 0, err


def test_ppo_on_flat_normalized_spaces_and_eval_reads_them_from_the_checkpoint(tmp_path, capsys):
    pytest.importorskip("stable_baselines3")
    env = ["--param", "max_episode_steps=10", "--param", "route_length=1500", "--num-envs", 2,
           "--device", "cpu", "--episodes", 2]  # fmt: skip
    sb3 = ["--param", "observation=flat", "--param", "action_scale=normalized"]
    code, out, err = run(capsys, "driving", "ppo", "--max-steps", 32, "--out", tmp_path,
                         *env, *sb3)  # fmt: skip
    assert code == 0, err
    res = json.loads(out)
    assert res["env"]["action_scale"] == "normalized" and res["env"]["observation"] == "flat"
    assert res["ppo"]["episodes"] == res["lane_keeping"]["episodes"] == 2
    # the checkpoint's spaces say how it acts; a --param that disagrees is refused
    code, out, err = run(capsys, "driving", "eval", tmp_path / "ppo.zip", *env)
    assert code == 0, err
    code, out, err = run(capsys, "driving", "eval", tmp_path / "ppo.zip", *env,
                         "--param", "action_scale=physical")  # fmt: skip
    assert code == 2 and "trained with action_scale=normalized" in err
    # lane keeping drives its own conventions whatever --param says (the same world)
    code, out, err = run(capsys, "driving", "eval", "lane-keeping", *env, *sb3)
    assert code == 0, err


def test_bad_input(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        run(capsys, "driving", "metrics")
    assert exc.value.code == 2 and "required: SCENES" in capsys.readouterr().err
    code, _, err = run(capsys, "driving", "eval", tmp_path / "nope.zip")
    assert code == 2 and "neither lane-keeping" in err
    code, _, err = run(capsys, "generate", "driving", "-n", 2, "--out", tmp_path / "s.h5",
                       "--param", "drive_length=3000", "--param", "route_length=1500")  # fmt: skip
    assert code == 2 and "shorter than the requested drive" in err
    # a scene file whose lane graph has an edge to a missing node
    scenes = tmp_path / "scenes.h5"
    assert run(capsys, "generate", "driving", "-n", 1, "--out", scenes, "--param",
               "drive_length=150", "--param", "route_length=1000")[0] == 0  # fmt: skip
    with h5py.File(scenes, "r+") as f:
        f["graphs/lanes/edges/index"][0, 1] = 10_000
    code, _, err = run(capsys, "driving", "metrics", scenes)
    assert code == 2 and "edge" in err
