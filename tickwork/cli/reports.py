"""The commands that only read and explain: ``stats`` and ``cron``."""

from __future__ import annotations

import json
from datetime import UTC

import click

from tickwork.cli import common
from tickwork.cli.common import both_zones, client, errors_as_messages, json_option, parse_datetime, print_json
from tickwork.cron import CronSchedule
from tickwork.schedules import fire_times


@click.command()
@json_option("Print the numbers as one JSON object.")
@click.pass_context
@errors_as_messages
def stats(ctx: click.Context, as_json: bool) -> None:
    """Queue depth and oldest due age, running tasks, nodes, runs per minute by status."""
    numbers = client(ctx).stats()
    if as_json:
        click.echo(json.dumps(numbers.to_dict(), sort_keys=True))
        return
    console = common.console
    age = "-" if numbers.oldest_age is None else f"{numbers.oldest_age:.1f} s"
    console.print(f"queue depth {numbers.depth} (due, unclaimed); oldest due {age} ago")
    console.print(f"running {numbers.running}; nodes {numbers.nodes}")
    console.print("tasks: " + (", ".join(f"{k} {v}" for k, v in sorted(numbers.by_status.items())) or "none"))
    note = " (of the newest runs only)" if numbers.window_full else ""
    for label, runs in (("last minute", numbers.runs_last_minute), ("last hour", numbers.runs_last_hour)):
        console.print(f"runs {label}{note}: " + (", ".join(f"{k} {v}" for k, v in sorted(runs.items())) or "none"))


@click.command(context_settings={"ignore_unknown_options": True})
@click.argument("expression")
@click.option("--timezone", default="UTC", show_default=True, help="IANA zone the expression is read in.")
@click.option("--after", "after_text", help="ISO 8601 time with an offset (default: now); times strictly after it.")
@click.option("-n", "count", default=5, show_default=True, type=click.IntRange(1, 1000))
@json_option("Print the explanation and the fire times (ISO 8601, UTC) as one JSON object.")
@errors_as_messages
def cron(expression: str, timezone: str, after_text: str | None, count: int, as_json: bool) -> None:
    """Explain a cron EXPRESSION and print its next N fire times, in its zone and in UTC.

    An expression that starts with "-" is taken as the expression, not as an option.
    """
    after = parse_datetime("after", after_text)
    times = fire_times(cron=expression, timezone=timezone, after=after, n=count)
    words = CronSchedule(expression, timezone).explain()
    if as_json:
        utc = [when.astimezone(UTC).isoformat() for when in times]
        print_json({"expression": expression, "timezone": timezone, "explanation": words, "fire_times": utc})
        return
    console = common.console
    console.print(f"{expression!r} in {timezone}" + (f": {words}" if words else ""), markup=False)
    for when in times:
        console.print("  " + both_zones(when, timezone), markup=False)
    if not times:
        console.print("  no fire time before the year 9999")
