from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("ojs", "0006_pool_overloaded"),
    ]

    operations = [
        migrations.AddField(
            model_name="workerpool",
            name="isolated",
            field=models.BooleanField(default=False),
        ),
    ]
