"""Where and how a job runs: its device, processes and precision, its files written whole, its lock
and its metrics logger."""
