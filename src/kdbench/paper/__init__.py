"""Package data: ``wang2023_tables.csv``, every published cell of Wang et al. (2023), Tables 1-4
(read by :mod:`kdbench.report.paper`)."""
