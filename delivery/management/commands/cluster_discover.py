from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from clusters.models import Cluster
from delivery.discovery import cluster_discover
from delivery.drivers import DriverError


class Command(BaseCommand):
    help = "Read a cluster's Nodes and their GPU labels into the inventory."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("cluster", help="cluster name")

    def handle(self, *args: Any, **options: Any) -> None:
        cluster = Cluster.objects.filter(name=options["cluster"]).first()
        if cluster is None:
            raise CommandError(f"no cluster named {options['cluster']!r}")
        try:
            nodes = cluster_discover(actor=None, cluster_id=cluster.pk)
        except DriverError as error:
            raise CommandError(str(error)) from None
        for node in nodes:
            gpus = list(node.gpus.all())
            model = gpus[0].model if gpus else "-"
            self.stdout.write(f"{node.name}: {len(gpus)} × {model}")
        self.stdout.write(f"{len(nodes)} GPU node(s) in the inventory of {cluster.name}")
