"""ANALYZE leaves out the columns no query selects rows by: a job's JSON documents
(arguments, meta, policies, results, errors...) and an event's data, subject and
source. On a busy queue autovacuum analyses ``ojs_job`` and ``ojs_event`` again and
again; these columns were most of that work (a 50,000-job table: 165 -> 101 ms, its
150,000 events: 250 -> 75 ms). PostgreSQL only; on the partitioned layout the parent
passes the targets to its partitions (and ``drivers.partitions`` to new ones).
"""

from django.db import migrations

NO_STATISTICS = {
    "ojs_job": (
        "args", "meta", "retry", "unique", "tags", "extra", "result", "error", "errors",
        "rate_limit", "parent_results", "last_progress",
    ),
    "ojs_event": ("data", "subject", "source"),
}


def _set(schema_editor, target):
    if schema_editor.connection.vendor != "postgresql":
        return
    for table, columns in NO_STATISTICS.items():
        alters = ", ".join(f'ALTER COLUMN "{c}" SET STATISTICS {target}' for c in columns)
        schema_editor.execute(f"ALTER TABLE {table} {alters}")


def leave_out(apps, schema_editor):
    _set(schema_editor, 0)


def put_back(apps, schema_editor):
    _set(schema_editor, -1)


class Migration(migrations.Migration):

    dependencies = [
        ("ojs", "0018_event_ids_without_unique_index"),
    ]

    operations = [migrations.RunPython(leave_out, put_back)]
