"""What a run writes: its record (result.json), its per-example predictions, its durations apart
from its rates, and a shipped student's model card."""
