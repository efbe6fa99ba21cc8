"""Training the state-space families: the backward of the Mamba-1 and Mamba-2 forward
(rules S-* of contracts/ops/IDENTICAL_SSM_CONTRACT.md) by the training contract's rules
(contracts/ops/IDENTICAL_TRAIN_CONTRACT.md, T-63 onward)."""
