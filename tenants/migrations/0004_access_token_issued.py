"""Tokens a platform admin issues for someone else (their owner claims the text), and the end of
DRF's plaintext ``Token`` keys.

The ``rest_framework.authtoken`` app is no longer installed: its admin page made API keys for any
user, stored in plain text and unaudited. Its table, where such keys may still be stored, is
dropped here (with its migration records and its content type), so no plaintext key survives in
the database or its dumps. A request that still sends one is refused with a 401 that says to sign
in again (tenants/token_auth.py, docs/identity.md "Keys of the old kind").
"""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

LEGACY_TABLE = "authtoken_token"


def legacy_keys_drop(apps, schema_editor):  # type: ignore[no-untyped-def]
    connection = schema_editor.connection
    if LEGACY_TABLE in connection.introspection.table_names():
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT COUNT(*) FROM {LEGACY_TABLE}")  # noqa: S608 - a constant
            (count,) = cursor.fetchone()
        schema_editor.execute(f"DROP TABLE {LEGACY_TABLE}")
        if count:
            print(f"\n  Deleted {count} API key(s) of the old kind (stored in plain text); their users sign in again.")
    with connection.cursor() as cursor:
        cursor.execute("SELECT COUNT(*) FROM django_migrations WHERE app = 'authtoken'")
        (recorded,) = cursor.fetchone()
    if recorded:  # the app's migrations, applied once, are forgotten with its table
        schema_editor.execute("DELETE FROM django_migrations WHERE app = 'authtoken'")
    content_type = apps.get_model("contenttypes", "ContentType")
    content_type.objects.using(schema_editor.connection.alias).filter(app_label="authtoken").delete()


class Migration(migrations.Migration):

    dependencies = [
        ('tenants', '0003_identity'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
        ('contenttypes', '0002_remove_content_type_name'),
    ]

    operations = [
        migrations.AddField(
            model_name='personalaccesstoken',
            name='claimed_at',
            field=models.DateTimeField(blank=True, help_text="When the owner took an issued token's text (until then it has none and works nowhere).", null=True),
        ),
        migrations.AddField(
            model_name='personalaccesstoken',
            name='issue_reason',
            field=models.CharField(blank=True, help_text='Why a platform admin issued it.', max_length=500),
        ),
        migrations.AddField(
            model_name='personalaccesstoken',
            name='issued_by',
            field=models.ForeignKey(blank=True, help_text='The platform admin who issued it for its owner; empty when the owner created it.', null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to=settings.AUTH_USER_MODEL),
        ),
        migrations.RunPython(legacy_keys_drop, migrations.RunPython.noop, elidable=False),
    ]
