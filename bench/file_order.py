"""The file order benchmark: :mod:`evaluation.file_order` (its docstring says what it
measures and its goal lines; ``--help``, its options).

    .venv/bin/python bench/file_order.py --help
"""

from evaluation.file_order import main
from evaluation.pareto import run_main

if __name__ == "__main__":
    run_main(main, "bench/file_order.py")
