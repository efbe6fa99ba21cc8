"""The transformer ops between the matrix products (contracts/ops/)."""
