"""Everything that speaks CCTools: launch makeflow, read its Work Queue
master's status and its logs, and turn them into one HTA Observation."""
