"""The worker shape benchmark: :mod:`evaluation.worker_shape` (its docstring says what it
measures and its goal lines; ``--help``, its options).

    .venv/bin/python bench/worker_shape.py --help
"""

from evaluation.pareto import run_main
from evaluation.worker_shape import main

if __name__ == "__main__":
    run_main(main, "bench/worker_shape.py")
