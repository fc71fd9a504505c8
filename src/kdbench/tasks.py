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
