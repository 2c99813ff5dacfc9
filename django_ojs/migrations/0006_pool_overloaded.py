from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("ojs", "0005_tenant_limits"),
    ]

    operations = [
        migrations.AddField(
            model_name="workerpool",
            name="overloaded_since",
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
