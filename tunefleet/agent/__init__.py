"""The worker side: connection, heartbeats, job execution, GPU discovery."""
