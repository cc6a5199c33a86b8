"""The `ablate` command line: one thin command per verb, grouped by what they work on (fitting: fit, rank,
extrapolate; planning: calibrate, plan; reporting: report; runs: status, sweep, train; recipes: show, init;
tracking: sync). The work lives in the library, the printing in ablate.render; a bad input is one `error[KIND]:`
line and exit 2 (errors.user_errors). The commands and their options: README.md; the JSON they print: docs/json.md."""

from __future__ import annotations

import inspect

import typer

from ablate.cli import fitting, planning, recipes, reporting, runs, tracking
from ablate.cli.errors import OneLineUsage, user_errors
from ablate.cli.options import plain_placeholders

app = typer.Typer(
    help="ScaleRL-style ablations for RL post-training of LLMs: sweep recipes, fit compute-scaling sigmoids, rank "
    "and extrapolate.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    cls=OneLineUsage,
)


@app.callback()
def main() -> None:
    """ablate: sweep RL recipes, fit the ScaleRL sigmoid to each run, rank design choices, extrapolate."""


VERBS = (
    fitting.fit,
    fitting.rank,
    fitting.extrapolate,
    planning.calibrate,
    planning.plan,
    reporting.report,
    runs.status,
    runs.sweep,
    recipes.show,
    runs.train,
    recipes.init,
    tracking.sync,
)


def flowing(doc: str) -> str:
    """A docstring as help that the terminal wraps: each paragraph's source lines joined (they break at 120
    columns of code, not at the reader's width), an `Example:` line kept on a line of its own."""
    out = []
    for para in inspect.cleandoc(doc).split("\n\n"):
        lines = [ln.strip() for ln in para.splitlines()]
        text = " ".join(ln for ln in lines if not ln.startswith("Example:"))
        examples = [ln for ln in lines if ln.startswith("Example:")]
        out.append("\n".join([t for t in (text, *examples) if t]))
    return "\n\n".join(out)


for verb in VERBS:
    plain_placeholders(verb)
    doc = flowing(verb.__doc__ or "")
    app.command(verb.__name__, help=doc, short_help=doc.split("\n\n", 1)[0])(user_errors(verb))

__all__ = ["app", "main"]
