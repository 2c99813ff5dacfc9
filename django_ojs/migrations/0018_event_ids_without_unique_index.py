"""Event ids keep no unique index: an id starts with its event's time (see
``EventQuerySet.with_id``), which ``ojs_event_time_idx`` already finds.

On PostgreSQL the constraint is dropped by name, whatever its columns: on the
time-partitioned layout (``manage.py ojs_partition``) it is ``(id, time)``, which
Django's own AlterField would not recognise as the field's.
"""

import django_ojs.ids
from django.db import migrations, models

CONSTRAINT = "ojs_event_id_key"


def _fields(apps):
    event = apps.get_model("ojs", "Event")
    unique = models.UUIDField(default=django_ojs.ids.uuid7, unique=True, editable=False)
    plain = models.UUIDField(default=django_ojs.ids.uuid7, editable=False)
    for field in (unique, plain):
        field.set_attributes_from_name("id")
        field.model = event
    return event, unique, plain


def drop_unique(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"ALTER TABLE ojs_event DROP CONSTRAINT IF EXISTS {CONSTRAINT}")
        return
    event, unique, plain = _fields(apps)
    schema_editor.alter_field(event, unique, plain)


def add_unique(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        with schema_editor.connection.cursor() as cursor:
            cursor.execute("SELECT relkind FROM pg_class WHERE oid = 'ojs_event'::regclass")
            partitioned = cursor.fetchone()[0] == "p"
        columns = "id, time" if partitioned else "id"
        schema_editor.execute(f"ALTER TABLE ojs_event ADD CONSTRAINT {CONSTRAINT} UNIQUE ({columns})")
        return
    event, unique, plain = _fields(apps)
    schema_editor.alter_field(event, plain, unique)


class Migration(migrations.Migration):

    dependencies = [
        ("ojs", "0017_ids_on_the_clock"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunPython(drop_unique, add_unique)],
            state_operations=[
                migrations.AlterField(
                    model_name="event",
                    name="id",
                    field=models.UUIDField(default=django_ojs.ids.uuid7, editable=False),
                ),
            ],
        ),
    ]
