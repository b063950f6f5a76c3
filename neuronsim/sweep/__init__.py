"""The model sweep: real models run as users run them, on ``neuron`` against the CPU.

OpInfo conformance (``neuronsim.kernels.conformance``) checks ops one by one; the sweep checks what
models do with them — tied weights, optimizer steps, ``generate()``'s bookkeeping — and where their
simulated device time goes (native kernels or host fallbacks).

- ``hf_zoo``: tiny randomly initialised Hugging Face models, one per architecture (decoder LMs,
  MoE, encoders, encoder-decoders, vision, audio, multimodal), built from config classes;
- ``hf_check``: one model on ``neuron`` vs the CPU — forward, backward and one AdamW step (eager or
  compiled), greedy ``generate()``;
- ``device_time``: the native share of a run's simulated device time and its host fallbacks;
- ``report``: the table (printed, docs/compat.md, JSON).

``python -m neuronsim.sweep --write docs/compat.md`` runs all of it (``--help`` for subsets).
"""
