"""The tasks kdbench knows, read from their configs (`conf/task/<name>.yaml`: a new task is one
file), in the paper's column order (each config's `order`), with the names its tables print (its
`title`)."""

from pathlib import Path

from omegaconf import OmegaConf

TASK_DIR = Path(__file__).parent / "conf" / "task"


def task_columns(folder: Path = TASK_DIR) -> dict[str, tuple[int, str]]:
    """{name: (order, title)} of every task config in `folder`, by its `order`, then by name."""
    configs = [
        OmegaConf.to_container(OmegaConf.load(path), resolve=True)
        for path in sorted(folder.glob("*.yaml"))
    ]
    configs.sort(key=lambda config: (config.get("order", 0), config["name"]))
    return {
        config["name"]: (config.get("order", 0), config.get("title") or config["name"])
        for config in configs
    }


COLUMNS = task_columns()
TASKS = {name: title for name, (_, title) in COLUMNS.items()}

# The majority-class score of each GLUE dev set, x100, per metric of conf/task/<name>.yaml (MNLI:
# matched): what a model that predicts the most frequent dev label everywhere scores, from the label
# counts of the dev sets (a real-data test recounts them). STS-B is a regression (no majority
# class); QQP and MNLI mismatched, whose dev sets are not in the shared data to recount, are left
# out.
MAJORITY = {
    "cola": {"mcc": 0.0, "accuracy": 100 * 721 / 1043},
    "sst2": {"accuracy": 100 * 444 / 872},
    "mrpc": {
        "f1": 100 * 2 * 279 / (279 + 408),
        "accuracy": 100 * 279 / 408,
    },  # F1 = 2 TP / (TP + N)
    "mnli": {"accuracy_matched": 100 * 3479 / 9815},
    "qnli": {"accuracy": 100 * 2761 / 5463},
    "rte": {"accuracy": 100 * 146 / 277},
    "wnli": {"accuracy": 100 * 40 / 71},
}

# The size of each GLUE dev set (MNLI: matched), the resolution of its scores: one example moves an
# accuracy by 100 / size points. A claimed tie's default margin is a number of these examples.
DEV_EXAMPLES = {
    "cola": 1043,
    "sst2": 872,
    "mrpc": 408,
    "stsb": 1500,
    "qqp": 40430,
    "mnli": 9815,
    "qnli": 5463,
    "rte": 277,
    "wnli": 71,
}
