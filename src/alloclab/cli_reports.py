"""Commands that look at stored results: report, experiments."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from .cli_app import DbOption, app, console, percent, show
from .errors import AlloclabError
from .store import Store


# --- looking at stored results -----------------------------------------------------------------

@app.command()
def report(
    experiment: Optional[int] = typer.Argument(None, help="Experiment id (default: the latest)."),
    db: Path = DbOption,
    details: bool = typer.Option(False, "--details"),
    baseline: Optional[str] = typer.Option(None, "--baseline", help="Variant label to compare against."),
    min_effect: str = typer.Option("0%", "--min-effect"),
    export_json: Optional[Path] = typer.Option(None, "--export-json"),
) -> None:
    """Show a stored experiment."""
    if not db.exists():
        raise AlloclabError(f"No database at {db}. Give the path of one with --db.")
    store = Store(db)
    show(store, experiment if experiment is not None else store.latest(), details=details,
         min_effect=percent(min_effect), baseline=baseline, export_json=export_json)


@app.command()
def experiments(db: Path = DbOption) -> None:
    """List stored experiments."""
    if not db.exists():
        raise AlloclabError(f"No database at {db}. Give the path of one with --db.")
    store = Store(db)
    t = Table()
    for col in ("id", "date", "kind", "status", "command / workload", "variants", "host"):
        t.add_column(col)
    for row in store.experiments():
        e = store.load(row["id"])
        t.add_row(str(row["id"]), row["created"], row["kind"], row["status"], row["title"][:60],
                  ", ".join(v["label"] for v in e.variants), e.machine.get("host", ""))
    console.print(t)


