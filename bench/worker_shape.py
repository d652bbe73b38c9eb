"""The worker shape benchmark: :mod:`hta.evaluation.worker_shape` (its docstring says what it
measures and its goal lines; ``--help``, its options).

    .venv/bin/python bench/worker_shape.py --help
"""

from hta.evaluation.pareto import run_main
from hta.evaluation.worker_shape import main

if __name__ == "__main__":
    run_main(main, "bench/worker_shape.py")
