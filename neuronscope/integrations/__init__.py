"""neuronscope inside the training loops other libraries own.

- :mod:`neuronscope.integrations.transformers`: ``ProfileCallback``, a Hugging Face
  ``TrainerCallback`` that captures chosen optimizer steps.
- :mod:`neuronscope.integrations.lightning`: ``NeuronscopeProfiler``, for
  ``lightning.pytorch.Trainer(profiler=...)``.

Each module imports its library when it is imported itself; ``import neuronscope`` imports
neither (the libraries are optional extras: ``pip install 'neuronscope[transformers]'`` or
``'neuronscope[lightning]'``).
"""
