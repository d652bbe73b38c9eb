"""Workers as Slurm batch jobs: ``hta makeflow --backend slurm`` (see :mod:`hta.backends.slurm.backend`)."""

from hta.backends.slurm.backend import SlurmProvider, from_options

__all__ = ["SlurmProvider", "from_options"]
