"""Kubernetes backend (worker pods, latency informer), manifests, worker image
and the local test cluster. The backend lands with the Kubernetes issue."""
