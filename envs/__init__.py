"""simsci.envs: gymnasium environments over simsci's systems and models.

Installed as ``simsci.envs`` (the folder sits at the top of the repository; see
shared/design/architecture.md). The environments themselves (``simsci/ODEControl-v0``,
``simsci/PDEControl-v0``, ``simsci/Surrogate-v0``, batched vector envs, recording
wrappers) arrive with the environments issue; this package is their home.
"""

__all__: list[str] = []
