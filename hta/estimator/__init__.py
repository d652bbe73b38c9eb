"""How many workers? The queue-drain estimator behind HTA's policy.

Given an observation and the preparation latency L, play the next L seconds forward:
running tasks finish at their category's measured runtime, freed resources take waiting
tasks newest first (the master's order, :mod:`workqueue_bridge.dispatch`), pending workers
arrive one L after they were asked for, and, with lookahead, tasks the DAG releases join
the queue when their parents finish. What still waits at the horizon is the shortage to buy
now; workers idle now that the play never needed are the waste to drain.

Unlike the thesis's Algorithm 1 (a loop over every second and every waiting task, O(L·n)),
the play is event-driven and aggregated. Reading order:

- :mod:`hta.estimator.queue_drain`: :class:`QueueDrainEstimator`, the play's answer sized
  into workers (packing, tail awareness);
- :mod:`hta.estimator.play`: one play, its slots and events;
- :mod:`hta.estimator.play_queue`: the waiting groups in the master's order;
- :mod:`hta.estimator.releases`: lookahead, what the DAG releases and when;
- :mod:`hta.estimator.forecast`: how long running tasks have left;
- :mod:`hta.estimator.options`: the options and the answer.
"""

from hta.estimator.forecast import (
                                    OUTLIER_FACTOR,
                                    OUTRUN_MARGIN,
                                    OVERDUE_FRACTION,
                                    barrier_wait,
                                    batch_last_runtime,
                                    expected_remaining,
                                    outrun_categories,
                                    past_outrun_margin,
                                    runtime_cdf,
)
from hta.estimator.options import Estimate, EstimatorOptions
from hta.estimator.queue_drain import QueueDrainEstimator

__all__ = ["OUTLIER_FACTOR", "OUTRUN_MARGIN", "OVERDUE_FRACTION", "Estimate", "EstimatorOptions", "QueueDrainEstimator",
           "barrier_wait", "batch_last_runtime", "expected_remaining", "outrun_categories", "past_outrun_margin",
           "runtime_cdf"]
