"""``recorded_env_kwargs``: the environment a rollout file recorded, read below the envs."""

import simsci.data


def test_recorded_env_kwargs_adds_the_episode_length():
    meta = {"env_id": "simsci/ODEControl-v0", "env_kwargs": {"task": "regulate"}}
    assert simsci.data.recorded_env_kwargs(meta) == {"task": "regulate"}
    meta["max_episode_steps"] = 50
    assert simsci.data.recorded_env_kwargs(meta) == {"task": "regulate", "max_episode_steps": 50}
    # the environment's own keyword wins over the file's time limit; meta is not changed
    meta["env_kwargs"]["max_episode_steps"] = 20
    assert simsci.data.recorded_env_kwargs(meta)["max_episode_steps"] == 20
    assert meta["max_episode_steps"] == 50
    assert simsci.data.recorded_env_kwargs({}) == {}
    assert simsci.data.recorded_env_kwargs({"env_kwargs": None, "max_episode_steps": None}) == {}
