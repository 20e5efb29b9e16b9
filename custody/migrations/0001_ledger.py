# The custody ledger (hand-written DDL, custody.schema) and its working state.

import django.db.models.deletion
from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

from custody.schema import statements_for


def create_ledger(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    """The ledger's table, indexes and append-only triggers (custody.schema)."""
    vendor = schema_editor.connection.vendor
    for statement in statements_for(vendor, "tables") + statements_for(vendor, "triggers"):
        schema_editor.execute(statement, params=None)


def drop_ledger(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    vendor = schema_editor.connection.vendor
    for statement in statements_for(vendor, "drop_triggers") + statements_for(vendor, "drop_tables"):
        schema_editor.execute(statement, params=None)


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ('clusters', '0009_push_created_at_by_the_clock'),
    ]

    operations = [
        migrations.RunPython(create_ledger, drop_ledger),
        migrations.CreateModel(
            name='CustodyEvent',
            fields=[
                ('id', models.BigAutoField(primary_key=True, serialize=False)),
                ('node_id', models.BigIntegerField()),
                ('chain_seq', models.BigIntegerField()),
                ('kind', models.CharField(choices=[('opened', 'Interval opened'), ('closed', 'Interval closed'), ('gap', 'Gap in reports')], max_length=8)),
                ('recorded_at', models.DateTimeField()),
                ('cluster', models.CharField(max_length=63)),
                ('node', models.CharField(max_length=253)),
                ('gpu_uuid', models.CharField(blank=True, max_length=96)),
                ('device_id', models.CharField(blank=True, max_length=128)),
                ('resource', models.CharField(blank=True, max_length=253)),
                ('sharing', models.CharField(blank=True, max_length=16)),
                ('namespace', models.CharField(blank=True, max_length=63)),
                ('pod', models.CharField(blank=True, max_length=253)),
                ('pod_uid', models.CharField(blank=True, max_length=64)),
                ('container', models.CharField(blank=True, max_length=253)),
                ('project_id', models.BigIntegerField(null=True)),
                ('department_id', models.BigIntegerField(null=True)),
                ('allocation_id', models.BigIntegerField(null=True)),
                ('attribution', models.CharField(blank=True, choices=[('granted', "The pod's project holds a grant booked on this GPU"), ('ungranted', "No grant of the pod's project (or no project) is booked on this GPU"), ('foreign_project', "The GPU is booked to another project's grant"), ('ambiguous', "Several grants of the pod's project are booked on this GPU")], max_length=16)),
                ('started_at', models.DateTimeField(null=True)),
                ('start_observed', models.CharField(blank=True, choices=[('appeared', 'First report that showed it; the report before did not'), ('after_gap', "First report that showed it after a gap (or the node's first report)")], max_length=16)),
                ('ended_at', models.DateTimeField(null=True)),
                ('end_observed', models.CharField(blank=True, choices=[('gone', 'Last report that showed it; the next report showed it gone'), ('gap', 'Last report that showed it; a gap followed')], max_length=16)),
                ('gone_at', models.DateTimeField(null=True)),
                ('confidence', models.CharField(blank=True, choices=[('high', 'Both ends bounded by adjacent reports, pod UID known, clock in sync'), ('medium', 'One end bounded by a gap, or the pod UID or clock offset unknown'), ('low', 'Neither end bounded by adjacent reports')], max_length=8)),
                ('gap_cause', models.CharField(blank=True, choices=[('lost_report', "A report's sequence number was skipped"), ('agent_restart', 'The agent started again (a restart or a node reboot)'), ('late_report', 'No report for more than the allowed number of intervals'), ('pod_resources_error', "The agent could not read the kubelet's PodResources"), ('not_reported', 'The report carried no custody (no pod_devices)'), ('reports_stopped', 'The node stopped reporting')], max_length=24)),
                ('opened_seq', models.BigIntegerField(null=True)),
                ('prev_hash', models.CharField(max_length=64)),
                ('hash', models.CharField(max_length=64)),
            ],
            options={
                'db_table': 'custody_event',
                'ordering': ['node_id', 'chain_seq'],
                'managed': False,
            },
        ),
        migrations.CreateModel(
            name='CustodyNodeState',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('agent_started_at', models.DateTimeField(null=True)),
                ('sequence', models.BigIntegerField(null=True)),
                ('last_report_at', models.DateTimeField(null=True)),
                ('interval_seconds', models.PositiveIntegerField(default=30)),
                ('clock_offset_seconds', models.FloatField(null=True)),
                ('custody_known', models.BooleanField(default=False, help_text='The last report carried custody without error.')),
                ('gap_since', models.DateTimeField(help_text='When custody became unknown, while it is.', null=True)),
                ('gap_cause', models.CharField(blank=True, choices=[('lost_report', "A report's sequence number was skipped"), ('agent_restart', 'The agent started again (a restart or a node reboot)'), ('late_report', 'No report for more than the allowed number of intervals'), ('pod_resources_error', "The agent could not read the kubelet's PodResources"), ('not_reported', 'The report carried no custody (no pod_devices)'), ('reports_stopped', 'The node stopped reporting')], max_length=24)),
                ('chain_seq', models.BigIntegerField(default=0)),
                ('chain_head', models.CharField(blank=True, max_length=64)),
                ('node', models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, related_name='custody_state', to='clusters.node')),
            ],
            options={
                'db_table': 'custody_node_state',
            },
        ),
        migrations.CreateModel(
            name='CustodyAlarm',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('kind', models.CharField(choices=[('ungranted', 'A GPU in use by a pod with no grant for that device or project'), ('foreign_project', 'A pod of one project on a GPU booked to another'), ('grant_unused', "A grant's booked GPUs held by none of its project's pods"), ('reports_stopped', 'A node whose reports stopped')], max_length=16)),
                ('key', models.CharField(help_text='What the alarm is about, unique per kind while raised.', max_length=600)),
                ('allocation_id', models.BigIntegerField(null=True)),
                ('department_id', models.BigIntegerField(null=True)),
                ('raised_at', models.DateTimeField()),
                ('node', models.ForeignKey(null=True, on_delete=django.db.models.deletion.CASCADE, related_name='+', to='clusters.node')),
            ],
            options={
                'db_table': 'custody_alarm',
                'constraints': [models.UniqueConstraint(fields=('kind', 'key'), name='custody_alarm_unique')],
            },
        ),
        migrations.CreateModel(
            name='CustodyHolding',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('device_id', models.CharField(max_length=128)),
                ('namespace', models.CharField(max_length=63)),
                ('pod', models.CharField(max_length=253)),
                ('pod_uid', models.CharField(blank=True, max_length=64)),
                ('container', models.CharField(max_length=253)),
                ('gpu_uuid', models.CharField(blank=True, max_length=96)),
                ('resource', models.CharField(blank=True, max_length=253)),
                ('sharing', models.CharField(blank=True, max_length=16)),
                ('project_id', models.BigIntegerField(null=True)),
                ('department_id', models.BigIntegerField(null=True)),
                ('allocation_id', models.BigIntegerField(null=True)),
                ('attribution', models.CharField(choices=[('granted', "The pod's project holds a grant booked on this GPU"), ('ungranted', "No grant of the pod's project (or no project) is booked on this GPU"), ('foreign_project', "The GPU is booked to another project's grant"), ('ambiguous', "Several grants of the pod's project are booked on this GPU")], max_length=16)),
                ('opened_seq', models.BigIntegerField()),
                ('started_at', models.DateTimeField()),
                ('start_observed', models.CharField(choices=[('appeared', 'First report that showed it; the report before did not'), ('after_gap', "First report that showed it after a gap (or the node's first report)")], max_length=16)),
                ('node', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='custody_holdings', to='clusters.node')),
            ],
            options={
                'db_table': 'custody_holding',
                'constraints': [models.UniqueConstraint(fields=('node', 'device_id', 'namespace', 'pod', 'pod_uid', 'container'), name='custody_holding_unique')],
            },
        ),
    ]
