"""The asyncio actor runtime and the actors: worker, job, scheduler, supervisor, local runner."""
