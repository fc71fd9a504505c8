"""The settings, each a recipe that reads top to bottom: task_specific, task_agnostic, finetune."""
