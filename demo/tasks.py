from __future__ import annotations

from celery import shared_task

from demo.usage import demo_usage_continue


@shared_task
def demo_usage_continue_task() -> int:
    """The demo cluster's readings up to now (demo/usage.py); ``make run`` only."""
    return demo_usage_continue()
