from typing import Any

from django.db import migrations, models

from clusters.stamps import DROP, stamp_statements


def create_triggers(apps: Any, schema_editor: Any) -> None:
    for statement in stamp_statements(schema_editor.connection.vendor):
        schema_editor.execute(statement)


def drop_triggers(apps: Any, schema_editor: Any) -> None:
    for statement in DROP.get(schema_editor.connection.vendor, []):
        schema_editor.execute(statement)


class Migration(migrations.Migration):

    dependencies = [
        ('clusters', '0007_user_access'),
    ]

    operations = [
        migrations.AddField(
            model_name='cluster',
            name='placement_version',
            field=models.BigIntegerField(default=0, editable=False),
        ),
        migrations.AddField(
            model_name='node',
            name='inventory_stamp',
            field=models.BigIntegerField(default=0, editable=False),
        ),
        migrations.RunPython(create_triggers, drop_triggers),
    ]
