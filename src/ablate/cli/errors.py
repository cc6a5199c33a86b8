"""How a command fails: one line on stderr and the shell's exit status, never a traceback (docs/security.md: text
from files is shown, not obeyed)."""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn, TypeVar

import typer
from typer.core import TyperGroup

from ablate.errors import ErrorKind, UserError
from ablate.text import as_cli, safe

F = TypeVar("F", bound=Callable[..., Any])


def fail(e: UserError) -> NoReturn:
    """`error[KIND]: <message>` on stderr and exit 2 (KIND: what is wrong, ablate.errors.ErrorKind). The message
    often quotes a file (a run name, a label, a value): its control characters are shown, not obeyed, and it stays
    one line (a config's several errors: one line each)."""
    each = getattr(e, "errors", None)  # config.ConfigErrors: several problems, one line each
    # a SettingError names its settings by their keywords (`min_effect`); here they are the verb's flags
    lines = [safe(m) for m in each] if isinstance(each, list) and each else [safe(as_cli(e))]
    typer.echo("\n".join(f"{prefix(e.kind)} {line}" for line in lines), err=True)
    raise typer.Exit(2) from None


def prefix(kind: ErrorKind) -> str:
    """How a refusal's line starts: `error[recipe]:`."""
    return f"error[{kind}]:"


def user_errors(fn: F) -> F:
    """Print a UserError as one `error[KIND]:` line per problem and exit 2 (fail). An OSError no check foresaw (a disk
    that filled up, a file system remounted read-only) is one such line too, naming the path. Ctrl-C exits 130 and
    a closed output pipe 141, as a shell reports them."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except UserError as e:
            fail(e)
        except BrokenPipeError:  # `ablate status | head`: the reader has gone, nothing is left to say
            with contextlib.suppress(OSError, ValueError):  # no second error at exit's flush
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            raise typer.Exit(141) from None  # 128 + SIGPIPE, as a shell reports it
        except KeyboardInterrupt:  # Ctrl-C in any verb: the shell's convention, no traceback
            typer.echo("interrupted", err=True)
            raise typer.Exit(130) from None
        except OSError as e:
            where = f"{e.filename}: " if e.filename else ""
            typer.echo(
                f"{prefix(ErrorKind.FILE)} {safe(where)}{safe(e.strerror or e)}; check that path (free space, "
                "permissions, a read-only file system)",
                err=True,
            )
            raise typer.Exit(2) from None

    return wrapper  # type: ignore[return-value]


def checked(check: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """An option's callback: `check(value)` returns the value to use (parsed, or as given) or raises UserError,
    printed as `fail` prints it, as the option is read."""

    def callback(value: Any) -> Any:
        try:
            return check(value)
        except UserError as e:
            fail(e)

    return callback


class OneLineUsage(TyperGroup):
    """The command group whose usage errors (a mistyped option, a bad value for one, a missing argument) are one
    `error[usage]:` line naming the culprit and where the options are, exit status 2, like every other bad input;
    `ablate` with no command still prints the help. Click's exceptions are told by class name: typer vendors its own
    click in some versions and uses the click package in others."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **kwargs: Any,
    ) -> Any:
        kwargs.update(complete_var=complete_var, windows_expand_args=windows_expand_args)
        if not standalone_mode:
            return super().main(args=args, prog_name=prog_name, standalone_mode=False, **kwargs)
        try:
            code = super().main(args=args, prog_name=prog_name, standalone_mode=False, **kwargs)
        except Exception as e:
            kinds = {c.__name__ for c in type(e).__mro__}
            if "NoArgsIsHelpError" in kinds:
                return super().main(args=args, prog_name=prog_name, **kwargs)  # the help, as typer prints it
            if "ClickException" not in kinds:
                raise
            message = safe(" ".join(e.format_message().split()).rstrip("."))  # type: ignore[attr-defined]
            ctx = getattr(e, "ctx", None)
            where = f"; see `{ctx.command_path} --help`" if "UsageError" in kinds and ctx is not None else ""
            if where and message.endswith("?"):  # "Did you mean 'rank'?": no "?;"
                where = f" (see `{ctx.command_path} --help`)"  # type: ignore[union-attr]
            typer.echo(f"{prefix(ErrorKind.USAGE)} {message}{where}", err=True)
            sys.exit(2 if "UsageError" in kinds else getattr(e, "exit_code", 1))
        sys.exit(code if isinstance(code, int) else 0)
