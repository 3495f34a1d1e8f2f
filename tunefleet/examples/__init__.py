"""A small real trainer shipped with tunefleet, for trying a fleet end to end."""
