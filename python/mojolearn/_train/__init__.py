"""Training under fp32_v1 (contracts/ops/IDENTICAL_TRAIN_CONTRACT.md, rules T-*):
the calls into the training kernels (kernels.py), the primitives (primitives.py), the
learning-rate schedules (schedule.py), the optimizers (optim.py), the backward of a
CausalLM (model.py) and the trainer (trainer.py). The public face is
``mojolearn.training``.

May import: ``_core``, ``_data``, ``_table``, ``_ops``, ``_io``, the public faces below
``models``, and ``models`` (its sub-layers and faces).
"""
