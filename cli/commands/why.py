"""``gpuportal why <allocation>``: why a request waits, what would start now and an estimated start
(GET allocations/{id}/why/), and the pods that wait on the cluster under it, each with its reason
(GET allocations/{id}/pods/); docs/pending.md."""

from __future__ import annotations

from typing import Any

import click

from cli.app import output_option, state
from cli.commands.allocations import _when as minutes_utc
from cli.exits import CliError, Exit
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


def pods_text(body: dict[str, Any]) -> str:
    """The pods that wait on the cluster, each with its reason and fix; or why none could be read."""
    if body.get("status") != "read":
        return f"Pods on the cluster: {body.get('status')}: {body.get('message')}"
    pods = body.get("pods") or []
    if not pods:
        return f"Pods on the cluster: none in {body.get('namespace')} Pending longer than {body.get('threshold_seconds')} s"
    lines = [f"Pods waiting in {body.get('namespace')} on {body.get('cluster')}:"]
    for pod in pods:
        lines += [f"  {pod['kind']} {pod['name']}: {pod['code']}", f"    {pod['text']}", f"    Fix: {pod['fix']}"]
    return "\n".join(lines)


@click.command("why")
@click.argument("allocation_id", type=int)
@output_option
def why(allocation_id: int) -> None:
    """Why a request has not started: the reason, the quota numbers of every level, who holds the
    room, what would start now and an estimated start; and the pods that wait on the cluster under
    it (over the namespace's quota, unschedulable, refused), each with its reason and fix."""
    api = state().api()
    try:
        body: dict[str, Any] | None = api.get(f"allocations/{allocation_id}/why/")
    except CliError as error:
        if error.code != Exit.CONFLICT:  # 409: it is not waiting (it may have pods that do)
            raise
        body = None
    pods = api.get(f"allocations/{allocation_id}/pods/")
    fmt = state().output
    if fmt != "table":
        click.echo(dump({**(body or {}), "pods": pods}, fmt))
        return
    if body is not None:
        click.echo(why_text(body))
    if pods.get("status") != "not-on-cluster":
        click.echo(pods_text(pods))


COMMANDS = [why]
