"""The one exception users see: a single line that names the problem and the fix."""

from collections.abc import Mapping


class KdbenchError(Exception):
    """Bad input or an unusable environment. The CLI prints the message as one line and exits 2."""

    exit_code = 2


class ConfigError(KdbenchError):
    """The composed configuration is invalid (caught before any heavy work starts)."""


class DataError(KdbenchError):
    """A data file is missing, empty or malformed."""


class ModelNotFoundError(KdbenchError):
    """A model could not be found locally or on the Hub."""


class MissingPackageError(KdbenchError):
    """A package the run needs is not installed."""


def missing_package(exc: BaseException) -> MissingPackageError | None:
    """`exc` as a MissingPackageError when it says that a whole package other than kdbench is not
    installed (not a module missing inside an installed package: that is a bug or a version)."""
    name = exc.name if isinstance(exc, ModuleNotFoundError) else None
    if not name or "." in name or name == "kdbench":
        return None
    return MissingPackageError(
        f"this run needs the package {name}, which is not installed: pip install {name}"
    )


class ReportError(KdbenchError):
    """Unusable results: ``kdbench.report`` prints ``kdbench.report: error: <message>``, any other
    command its own one line, and exits 2."""


def lookup(registry: Mapping, name: str, kind: str):
    """`registry[name]`, or a ConfigError listing the valid names of this kind."""
    if name not in registry:
        raise ConfigError(f"unknown {kind} {name!r}; valid: {', '.join(sorted(registry))}")
    return registry[name]
