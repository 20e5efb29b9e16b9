"""Triggers that make the audit tables append-only and keep the sequences gapless (audit.schema)."""

from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

from audit.schema import statements_for


def create_triggers(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    for statement in statements_for(schema_editor.connection.vendor, "triggers"):
        schema_editor.execute(statement, params=None)


def drop_triggers(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    for statement in statements_for(schema_editor.connection.vendor, "drop_triggers"):
        schema_editor.execute(statement, params=None)


class Migration(migrations.Migration):
    dependencies = [("audit", "0001_initial")]

    operations = [migrations.RunPython(create_triggers, drop_triggers)]
