"""tunefleet: run GPU training jobs across a fleet of machines."""

__version__ = "0.1.0"
