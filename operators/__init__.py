"""simsci.operators: neural operator backbones and the ∂-NO derivative features.

Installed as ``simsci.operators`` (the folder sits at the top of the repository; see
shared/design/architecture.md). The operators (FNO, DeepONet, U-Net, ∂-NO) arrive with
the ∂-NO issue; this package is their home.
"""

__all__: list[str] = []
