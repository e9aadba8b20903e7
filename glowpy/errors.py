"""User-facing errors. Each carries one line of text; the CLI prints it as
`model-compiler: error: <text>` and exits 1 (model problem) or 2 (usage problem)."""


class GlowpyError(Exception):
    exit_code = 1


class ModelError(GlowpyError):
    """The model cannot be compiled as given (bad file, unsupported op, bad shape...)."""


class UsageError(GlowpyError):
    """The command line or API call is malformed."""
    exit_code = 2
