"""Webhook subscriptions (OJS webhooks extension) and the dispatcher's cursor over
``ojs_event``, created at the newest event so that nothing stored before webhooks existed
is delivered."""

import django.utils.timezone
import django_ojs.ids
from django.db import migrations, models


def _cursor(apps, schema_editor):
    alias = schema_editor.connection.alias
    Event = apps.get_model("ojs", "Event")
    last = Event.objects.using(alias).order_by("-seq").values_list("seq", flat=True).first()
    apps.get_model("ojs", "WebhookCursor").objects.using(alias).create(id=1, seq=last or 0)


class Migration(migrations.Migration):
    dependencies = [
        ("ojs", "0019_no_statistics_of_documents"),
    ]

    operations = [
        migrations.CreateModel(
            name="WebhookCursor",
            fields=[
                (
                    "id",
                    models.PositiveSmallIntegerField(default=1, primary_key=True, serialize=False),
                ),
                ("seq", models.BigIntegerField(default=0)),
            ],
            options={
                "db_table": "ojs_webhook_cursor",
            },
        ),
        migrations.CreateModel(
            name="WebhookSubscription",
            fields=[
                (
                    "id",
                    models.UUIDField(
                        default=django_ojs.ids.uuid7,
                        editable=False,
                        primary_key=True,
                        serialize=False,
                    ),
                ),
                ("url", models.CharField(max_length=2048)),
                ("events", models.JSONField(default=list)),
                ("filter", models.JSONField(blank=True, default=dict)),
                ("active", models.BooleanField(default=True)),
                ("secret", models.CharField(editable=False, max_length=255)),
                (
                    "previous_secret",
                    models.CharField(blank=True, default="", editable=False, max_length=255),
                ),
                (
                    "previous_secret_expires_at",
                    models.DateTimeField(blank=True, editable=False, null=True),
                ),
                ("metadata", models.JSONField(blank=True, default=dict)),
                ("since_seq", models.BigIntegerField(default=0, editable=False)),
                (
                    "created_at",
                    models.DateTimeField(default=django.utils.timezone.now, editable=False),
                ),
                (
                    "updated_at",
                    models.DateTimeField(default=django.utils.timezone.now, editable=False),
                ),
                ("last_delivery_at", models.DateTimeField(blank=True, editable=False, null=True)),
                (
                    "last_delivery_status",
                    models.IntegerField(blank=True, editable=False, null=True),
                ),
                ("failure_count", models.IntegerField(default=0, editable=False)),
            ],
            options={
                "verbose_name": "webhook subscription",
                "db_table": "ojs_webhook_subscription",
                "ordering": ["created_at", "id"],
            },
        ),
        migrations.RunPython(_cursor, migrations.RunPython.noop),
    ]
