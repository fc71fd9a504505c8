"""The GLUE tasks kdbench knows, in the paper's column order, with the names its tables print.

Each has a config `conf/task/<name>.yaml` (a test checks the two agree).
"""

TASKS = {
    "cola": "CoLA",
    "sst2": "SST-2",
    "mrpc": "MRPC",
    "stsb": "STS-B",
    "qqp": "QQP",
    "mnli": "MNLI",
    "qnli": "QNLI",
    "rte": "RTE",
    "wnli": "WNLI",
}

# The majority-class score of each GLUE dev set, x100, per metric of conf/task/<name>.yaml (MNLI: matched): what
# a model that predicts the most frequent dev label everywhere scores, from the label counts of the dev sets
# (a real-data test recounts them). STS-B is a regression (no majority class); QQP and MNLI mismatched, whose dev
# sets are not in the shared data to recount, are left out.
MAJORITY = {
    "cola": {"mcc": 0.0, "accuracy": 100 * 721 / 1043},
    "sst2": {"accuracy": 100 * 444 / 872},
    "mrpc": {"f1": 100 * 2 * 279 / (279 + 408), "accuracy": 100 * 279 / 408},  # F1 = 2 TP / (TP + N)
    "mnli": {"accuracy_matched": 100 * 3479 / 9815},
    "qnli": {"accuracy": 100 * 2761 / 5463},
    "rte": {"accuracy": 100 * 146 / 277},
    "wnli": {"accuracy": 100 * 40 / 71},
}
