"""Where a job's work survives its worker: the artifact store (data directory or bucket),
upload tokens, keys, checkpoint manifests and retention. See docs/operations.md."""
