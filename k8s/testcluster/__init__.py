"""The local test cluster (project scripts; binaries cached outside git)."""
