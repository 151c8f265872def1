"""The job queue engine: jobs, workers, schedules, limits."""
