"""Workers as Slurm batch jobs: ``hta makeflow --backend slurm`` (see :mod:`hta.backends.slurm.backend`)."""

from hta.backends.slurm.backend import SlurmBackend, from_options

__all__ = ["SlurmBackend", "from_options"]
