from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("agent", "0013_branches"),  # re-chained after main (was 0010_conversation_approval)
    ]

    operations = [
        migrations.AddField(
            model_name="conversation",
            name="agent",
            field=models.CharField(default="harness", max_length=20),
        ),
    ]
