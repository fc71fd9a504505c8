"""What kdbench measures of a run: FLOPs, memory bounds, step timings, inference cost, synthetic
inputs and the host's share of a step."""
