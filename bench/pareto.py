"""The pareto benchmark: :mod:`evaluation.pareto` (its docstring says what it
measures and its goal lines; ``--help``, its options).

    .venv/bin/python bench/pareto.py --help
"""

from evaluation.pareto import main, run_main

if __name__ == "__main__":
    run_main(main, "bench/pareto.py", "interrupted (finished runs are kept)")
