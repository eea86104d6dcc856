"""What every drpc command line shares: one-line usage errors, user modules found beside the user.

Contract:

- ``CommandLineParser`` is an ``argparse.ArgumentParser`` whose usage errors
  (an unknown option, a bad value, a failed check passed to ``error``) print
  one line on stderr, ``PROG: error: MESSAGE (see PROG --help)``, and exit
  with status 2. Plain argparse prints the whole usage first, which in a
  command with many options pushes the one line that matters out of sight.
  Sub-commands made with ``add_subparsers`` get the same class.
- ``import_from_working_directory()`` puts the working directory first on
  ``sys.path`` (if it is not on it already), as ``python -m`` does, so
  ``--topology mytopos:topology`` finds ``mytopos.py`` in the directory the
  command runs in whether the command started as ``python -m drpc.server`` or
  as an installed script (whose ``sys.path`` starts at its own ``bin``
  directory). ``WORKING_DIRECTORY_HELP`` is the sentence the commands' help
  uses to say so.
- ``positive_seconds`` and ``seconds_or_zero`` are argparse types of a number of
  seconds (finite; above zero, or at least zero); ``port_number`` one of a TCP port.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import NoReturn

USAGE_ERROR = 2
"""Exit status of a usage error (argparse's)."""

WORKING_DIRECTORY_HELP = (
    "MODULE is imported as python -m would: the working directory first, then the "
    "installed packages"
)


class CommandLineParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (see the module doc)."""

    def error(self, message: str) -> NoReturn:
        self.exit(USAGE_ERROR, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def import_from_working_directory() -> None:
    """Put the working directory first on ``sys.path`` unless it is there already."""
    here = os.getcwd()
    if not any(os.path.abspath(entry or os.curdir) == here for entry in sys.path):
        sys.path.insert(0, here)


TOKEN_ENVIRONMENT = "DRPC_TOKEN"
"""The environment variable an HTTP caller's bearer token is read from (a token is never
a command-line argument, which any user of the host can read)."""


def add_tls_arguments(parser: argparse.ArgumentParser) -> None:
    """``--tls-ca/--tls-cert/--tls-key``, the options of every command that calls a server
    (``drpc.protocol.tls.tls_from_args`` reads them)."""
    parser.add_argument("--tls-ca", metavar="FILE", help="CA that signed the server's certificate")
    parser.add_argument(
        "--tls-cert", metavar="FILE", help="client certificate to present (its CN is the user)"
    )
    parser.add_argument("--tls-key", metavar="FILE", help="the client certificate's key")


def token_from(token_file: str | None) -> str | None:
    """The bearer token in ``token_file`` (stripped), else ``$DRPC_TOKEN``, else None."""
    if token_file:
        with open(token_file, encoding="utf-8") as file:
            return file.read().strip()
    return os.environ.get(TOKEN_ENVIRONMENT) or None


def _seconds(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if seconds != seconds or seconds == float("inf"):
        raise argparse.ArgumentTypeError(f"not a finite number of seconds: {text!r}")
    return seconds


def positive_seconds(text: str) -> float:
    """An argparse type: a finite number of seconds above zero."""
    seconds = _seconds(text)
    if not seconds > 0:
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text!r}")
    return seconds


def seconds_or_zero(text: str) -> float:
    """An argparse type: a finite number of seconds, zero or more."""
    seconds = _seconds(text)
    if seconds < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more seconds, got {text!r}")
    return seconds


def port_number(text: str) -> int:
    """An argparse type: a TCP port, 0 (any free one) to 65535."""
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port number 0-65535, got {text!r}")
    return port
