"""From a composed config to a typed plan: every group read, checked and resolved once."""
