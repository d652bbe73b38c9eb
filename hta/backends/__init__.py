"""Worker backends: the mechanism that makes workers exist (local processes,
Kubernetes pods). See :mod:`hta.backends.base` for the contract."""
