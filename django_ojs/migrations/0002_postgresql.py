"""What only PostgreSQL has: the trigger that wakes ``django_ojs.wait``, and no column
statistics for the JSON documents. Nothing on SQLite.

Both operations are idempotent, so a database migrated by a development version of
django-ojs (whose 0001 to 0022 this and 0001_initial replace) takes this one as it is.
"""

from django.db import migrations

# A terminal transition of a job someone waits for (``awaited``) is announced on the
# channel ``ojs_finished`` with the job id, so ``django_ojs.wait`` wakes at once. The WHEN
# clause keeps the cost off every other job (it is evaluated per updated row).
TRIGGER = """
CREATE OR REPLACE FUNCTION ojs_job_finished() RETURNS trigger AS $$
BEGIN
    PERFORM pg_notify('ojs_finished', NEW.id::text);
    RETURN NULL;
END
$$ LANGUAGE plpgsql;
DROP TRIGGER IF EXISTS ojs_job_finished ON ojs_job;
CREATE TRIGGER ojs_job_finished AFTER UPDATE OF state ON ojs_job FOR EACH ROW
WHEN (NEW.awaited AND NEW.state IN ('completed', 'discarded', 'cancelled'))
EXECUTE FUNCTION ojs_job_finished();
"""
DROP_TRIGGER = """
DROP TRIGGER IF EXISTS ojs_job_finished ON ojs_job;
DROP FUNCTION IF EXISTS ojs_job_finished();
"""

# ANALYZE leaves out the columns no query selects rows by: a job's JSON documents and an
# event's data, subject and source. On a busy queue autovacuum analyses ``ojs_job`` and
# ``ojs_event`` again and again; these columns were most of that work (a 50,000-job
# table: 165 -> 101 ms, its 150,000 events: 250 -> 75 ms). On the partitioned layout the
# parent passes the targets to its partitions (and ``drivers.partitions`` to new ones).
NO_STATISTICS = {
    "ojs_job": (
        "args",
        "meta",
        "retry",
        "unique",
        "tags",
        "extra",
        "result",
        "error",
        "errors",
        "rate_limit",
        "parent_results",
        "last_progress",
    ),
    "ojs_event": ("data", "subject", "source"),
}


def _statistics(schema_editor, target):
    for table, columns in NO_STATISTICS.items():
        alters = ", ".join(f'ALTER COLUMN "{c}" SET STATISTICS {target}' for c in columns)
        schema_editor.execute(f"ALTER TABLE {table} {alters}")


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(TRIGGER)
    _statistics(schema_editor, 0)


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    _statistics(schema_editor, -1)
    schema_editor.execute(DROP_TRIGGER)


class Migration(migrations.Migration):
    dependencies = [
        ("ojs", "0001_initial"),
    ]

    operations = [migrations.RunPython(forwards, backwards)]
