"""simsci/Driving-v0 says why each episode ended: ``info["end_reason"]`` (the same names
as simsci/VectorWorld-v1, whose own end reasons are tested with its world in
tests/models/vectorworld/test_world.py)."""

import numpy as np
import torch

from simsci.envs import END_REASONS, DrivingEnv, DrivingVectorEnv

KW = {"num_roads": 2, "route_length": 1500.0}


def test_the_names():
    assert END_REASONS[0] == "" and set(END_REASONS[1:]) == {
        "collision",
        "offroad",
        "left_generated_lanes",
        "distance",
        "time_limit",
    }


def test_single_env_reports_the_reason_on_the_last_step_only():
    env = DrivingEnv(max_distance=40.0, **KW)
    _, info = env.reset(seed=1)
    assert "end_reason" not in info
    for _ in range(100):
        _, r, term, trunc, info = env.step(np.zeros(2, np.float32))
        if term or trunc:
            break
        assert "end_reason" not in info
    assert trunc and info["end_reason"] == "distance" and info["distance"] >= 40.0
    env.reset(seed=2)
    for _ in range(100):
        _, r, term, trunc, info = env.step(np.array([0.0, 0.5], np.float32))
        if term:
            break
    assert term and info["offroad"] and info["end_reason"] == "offroad"


def test_vector_env_reason_and_mask_with_autoreset():
    env = DrivingVectorEnv(3, array_backend="torch", max_episode_steps=4, **KW)
    env.reset(seed=0)
    a = torch.zeros(3, 2)
    for _ in range(4):
        _, _, term, trunc, info = env.step(a)
    assert bool(trunc.all()) and list(info["end_reason"]) == ["time_limit"] * 3
    assert info["_end_reason"].all() and isinstance(info["end_reason"], np.ndarray)
    _, _, _, _, info = env.step(a)  # NextStep: this step resets
    assert list(info["end_reason"]) == [""] * 3 and not info["_end_reason"].any()
    same = DrivingVectorEnv(2, max_episode_steps=3, autoreset_mode="SameStep", **KW)
    same.reset(seed=0)
    for _ in range(3):
        _, _, _, trunc, info = same.step(np.zeros((2, 2), np.float32))
    assert trunc.all() and list(info["final_info"]["end_reason"]) == ["time_limit"] * 2
    assert not info["_end_reason"].any()  # the new episodes have not ended
