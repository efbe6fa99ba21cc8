"""mojolearn.models: transformer models that compute under a numeric profile."""
