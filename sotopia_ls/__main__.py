"""``sotopia-ls`` and ``python -m sotopia_ls``: the command line, or one line saying why not.

The rubric is read when the package is imported, so a bad ``SOTOPIA_LS_RUBRIC`` is caught
here, before the commands exist.
"""

from __future__ import annotations

from .errors import InvalidRubric


def run() -> None:
    try:
        from .cli import main
    except InvalidRubric as error:
        raise SystemExit(f"Error: {error}") from None
    main()


if __name__ == "__main__":
    run()
