"""The evaluation harness on the simulator: HTA's settings against every rival's on
workloads, clusters and seeds (:mod:`~evaluation.pareto`), worker shapes
(:mod:`~evaluation.worker_shape`), and what the workflow file's order costs
(:mod:`~evaluation.file_order`). ``bench/`` runs each and exits non-zero on a missed
goal line."""
