from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("agent", "0014_conversation_agent"),
    ]

    operations = [
        migrations.AddField(
            model_name="user",
            name="rate_window",
            field=models.BigIntegerField(default=0, editable=False),
        ),
        migrations.AddField(
            model_name="user",
            name="rate_count",
            field=models.PositiveIntegerField(default=0, editable=False),
        ),
        migrations.AddField(
            model_name="user",
            name="rate_previous",
            field=models.PositiveIntegerField(default=0, editable=False),
        ),
    ]
