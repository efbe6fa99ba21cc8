"""The state-space model ops (Mamba-1 / Mamba-2; contracts/ops/)."""
