"""Framework integrations: callbacks that time steps from a framework's own hooks.

- ``stepscope.integrations.lightning.StepscopeCallback`` for PyTorch Lightning's ``Trainer``
- ``stepscope.integrations.transformers.StepscopeCallback`` for Hugging Face ``transformers.Trainer``

Each module imports its framework when it is imported; this package imports neither.
"""
