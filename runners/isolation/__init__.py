"""Running points apart from each other: a worker process per point (isolate), one timing job per GPU across
processes (lease), and waiting for a Slurm array's jobs (slurm_jobs)."""
