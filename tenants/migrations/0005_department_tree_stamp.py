from typing import Any

from django.db import migrations, models

from tenants.tree_stamp import DROP, tree_stamp_statements


def create_trigger(apps: Any, schema_editor: Any) -> None:
    for statement in tree_stamp_statements(schema_editor.connection.vendor):
        schema_editor.execute(statement)


def drop_trigger(apps: Any, schema_editor: Any) -> None:
    for statement in DROP.get(schema_editor.connection.vendor, []):
        schema_editor.execute(statement)


class Migration(migrations.Migration):

    dependencies = [
        ('tenants', '0004_access_token_issued'),
    ]

    operations = [
        migrations.AddField(
            model_name='department',
            name='tree_stamp',
            field=models.BigIntegerField(default=0, editable=False),
        ),
        migrations.RunPython(create_trigger, drop_trigger),
    ]
