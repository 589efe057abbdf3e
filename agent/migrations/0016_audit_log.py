import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("agent", "0015_prompt_rate"),
    ]

    operations = [
        migrations.CreateModel(
            name="AuditEntry",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False,
                                           verbose_name="ID")),
                ("time", models.DateTimeField(auto_now_add=True, db_index=True)),
                ("action", models.CharField(choices=[
                    ("sign_in", "Signed in"), ("sign_in_failed", "Sign-in failed"),
                    ("locked_out", "Locked out (too many failed sign-ins)"),
                    ("sign_out", "Signed out"), ("token_created", "API token created"),
                    ("token_revoked", "API token revoked"),
                    ("member_added", "Shared with a user"),
                    ("member_changed", "A member's role changed"),
                    ("member_removed", "A member removed"),
                    ("team_opened", "Opened to the team"), ("team_closed", "Closed to the team"),
                    ("budget_changed", "Budget changed"),
                ], db_index=True, max_length=20)),
                ("actor_name", models.CharField(blank=True, max_length=150)),
                ("target", models.CharField(blank=True, max_length=300)),
                ("ip", models.GenericIPAddressField(blank=True, null=True)),
                ("details", models.JSONField(blank=True, default=dict)),
                ("actor", models.ForeignKey(blank=True, null=True,
                                            on_delete=django.db.models.deletion.SET_NULL,
                                            related_name="+", to=settings.AUTH_USER_MODEL)),
            ],
            options={"verbose_name_plural": "audit log", "ordering": ["-time"]},
        ),
    ]
