"""The local Kubernetes test cluster: test infrastructure, not part of the installed package
(run from the repository root; binaries cached outside git)."""
