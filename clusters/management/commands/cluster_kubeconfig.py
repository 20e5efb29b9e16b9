from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from clusters.credentials import cluster_kubeconfig_set
from clusters.models import Cluster, ClusterDriverKind
from kernel.errors import ApplicationError


class Command(BaseCommand):
    help = "Store a cluster's kubeconfig (encrypted at rest) and switch it to the kubernetes driver."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("cluster", help="cluster name")
        parser.add_argument("kubeconfig", type=Path, help="kubeconfig file")

    def handle(self, *args: Any, **options: Any) -> None:
        cluster = Cluster.objects.filter(name=options["cluster"]).first()
        if cluster is None:
            raise CommandError(f"no cluster named {options['cluster']!r}")
        try:
            cluster_kubeconfig_set(actor=None, cluster_id=cluster.pk, kubeconfig=options["kubeconfig"].read_text())
        except (OSError, ApplicationError) as error:
            raise CommandError(str(getattr(error, "message", error))) from None
        Cluster.objects.filter(pk=cluster.pk).update(driver=ClusterDriverKind.KUBERNETES)
        self.stdout.write(f"kubeconfig of {cluster.name} stored; driver: kubernetes")
