"""CSS: classify each container (task) as IO- or CPU-intensive from its futex
calls and pin its cores (Song, Yu & Lee, Appl. Sci. 2022), as a MAPE-K loop
beside the worker. See :mod:`hta.node.css.daemon`."""
