"""The evaluation simulator (simpy): any Policy against a workload on a
simulated cluster, Work Queue and Makeflow. See :mod:`hta.sim.world`."""
