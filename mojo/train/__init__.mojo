"""The training ops: the backward of the model ops, the loss, clipping, accumulation
and the optimizers (contracts/ops/IDENTICAL_TRAIN_CONTRACT.md)."""
