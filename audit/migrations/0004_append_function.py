"""The chain step of ``audit_record`` on PostgreSQL as one function, ``audit_event_append``: one
round trip while the chain lock is held (``audit.schema.POSTGRESQL_APPEND``). Nothing on SQLite."""

from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

from audit.schema import statements_for


def create_function(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    for statement in statements_for(schema_editor.connection.vendor, "append"):
        schema_editor.execute(statement, params=None)


def drop_function(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    for statement in statements_for(schema_editor.connection.vendor, "append_drop"):
        schema_editor.execute(statement, params=None)


class Migration(migrations.Migration):
    dependencies = [("audit", "0003_quarantine")]

    operations = [migrations.RunPython(create_function, drop_function)]
