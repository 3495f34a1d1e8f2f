"""Stand-ins for outside systems (NVML) that tests inject in place of the real thing."""
