"""The deployment files agree with the code: compose services reference what exists."""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def test_it_declares_every_production_process_in_compose() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert {"postgres", "redis", "web", "worker", "beat", "migrate"} <= set(services)
    for name, service in services.items():
        for dependency in service.get("depends_on", {}):
            assert dependency in services, f"{name} depends on unknown service {dependency}"
        for secret in service.get("secrets", []):
            assert secret in compose["secrets"]
        for volume in service.get("volumes", []):
            source = volume.split(":", 1)[0]
            assert source.startswith(("/", ".")) or source in compose["volumes"], volume
    assert "gunicorn" in services["web"]["command"]
    assert services["worker"]["command"][:3] == ["celery", "-A", "gpuportal"]
    assert services["web"]["environment"]["CELERY_BROKER_URL"].startswith("redis://")
    assert services["web"]["environment"]["DATABASE_URL"].startswith("postgres://")
