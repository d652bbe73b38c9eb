"""HTA, the High-Throughput Autoscaler: runs Makeflow workflows on Work Queue
workers and decides, from the workflow itself, how many workers should exist."""

__version__ = "0.1.0"
