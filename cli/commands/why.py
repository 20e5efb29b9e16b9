"""``gpuportal why <allocation>``: why a request waits, what would start now and an estimated start
(GET allocations/{id}/why/, docs/pending.md)."""

from __future__ import annotations

from typing import Any

import click

from cli.app import output_option, state
from cli.commands.allocations import _when as minutes_utc
from cli.output import dump


def _when(value: Any) -> str:
    """An API timestamp in minutes, UTC (as the allocation tables write it); null: none found."""
    return f"{minutes_utc(value)} UTC" if isinstance(value, str) else "none within 30 days"


def _quota_line(line: dict[str, Any]) -> str:
    what = line.get("flavor") or "GPU-equivalents"
    if line.get("priority_class"):
        what = f"{line['priority_class']}'s share of {what}"
    now = f" (now {line['limit_now']}, held now {line['in_use_now']})" if "limit_now" in line else ""
    verdict = "fits" if line.get("fits") else "EXCEEDED"
    return (f"  {line.get('department')}: {what}: asked {line.get('requested')}, held {line.get('in_use')}, "
            f"limit {line.get('limit')}, effective limit {line.get('effective_limit')}{now}: {verdict}")


def _holders(holders: dict[str, Any]) -> list[str]:
    lines = [f"Held ({holders.get('for')}):"]
    for grant in holders.get("named", []):
        lines.append(f"  #{grant['allocation']} {grant['project']} ({grant['department']}): {grant['quantity']} × "
                     f"{grant['flavor']} until {_when(grant['ends_at'])}")
    for department in holders.get("departments", []):
        lines.append(f"  {department['department']}: {department['gpu_equivalents']} GPU-equivalents in "
                     f"{department['grants']} grant{'' if department['grants'] == 1 else 's'} (guaranteed {department['guaranteed']}, borrowed "
                     f"{department['borrowed']})")
    return lines


def why_text(body: dict[str, Any]) -> str:
    """The answer for people, in the order a reader asks: why, the numbers, who, what instead, when."""
    reason = body["reason"]
    lines = [f"Allocation {body.get('allocation')} ({body.get('state')}): {reason['code']}", f"  {reason['text']}"]
    lines += [f"  also {extra['code']}: {extra['text']}" for extra in body.get("secondary", [])]
    if body.get("quota"):
        lines += ["Quota levels:", *(_quota_line(line) for line in body["quota"])]
    if body.get("holders"):
        lines += _holders(body["holders"])
    if body.get("alternatives"):
        lines.append("What would start now:")
        for offer in body["alternatives"]:
            at = f" from {_when(offer['starts_at'])}" if offer.get("starts_at") else ""
            lines.append(f"  {offer['kind']}: {offer['quantity']} × {offer['flavor']}{at}: {offer['text']}")
    if body.get("queue"):
        queue = body["queue"]
        lines.append(f"Queue: {queue['position']} of {queue['of']} ({queue['ahead']} ahead)")
    estimate = body.get("estimate")
    if estimate:
        lines += [f"Estimated start: {_when(estimate['starts_at'])}: {estimate['basis']}",
                  f"  Reliability: {estimate['reliability']}"]
    return "\n".join(lines)


@click.command("why")
@click.argument("allocation_id", type=int)
@output_option
def why(allocation_id: int) -> None:
    """Why a request has not started: the reason, the quota numbers of every level, who holds the
    room, what would start now and an estimated start."""
    body = state().api().get(f"allocations/{allocation_id}/why/")
    fmt = state().output
    click.echo(why_text(body) if fmt == "table" else dump(body, fmt))


COMMANDS = [why]
