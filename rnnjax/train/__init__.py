"""The run harness: experiments, the trainer, run folders, jobs, executors, sweeps, reports."""
