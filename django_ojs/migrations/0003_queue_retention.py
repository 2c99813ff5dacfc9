"""A queue's own retention of its finished jobs (queue config §6.3): ``Queue.retention``."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("ojs", "0002_postgresql"),
    ]

    operations = [
        migrations.AddField(
            model_name="queue",
            name="retention",
            field=models.JSONField(blank=True, null=True),
        ),
    ]
