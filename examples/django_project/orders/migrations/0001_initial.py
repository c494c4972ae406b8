from django.db import migrations, models

import hivenet_db.django.fields


class Migration(migrations.Migration):
    initial = True
    # No dependency on ("hivenet", "0001_schema") although the serial's default calls its
    # function: the app installs schema hivenet before any other migration of the same migrate.
    dependencies = []

    operations = [
        migrations.CreateModel(
            name="Order",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True,
                                           serialize=False, verbose_name="ID")),
                ("serial", models.CharField(
                    db_default=hivenet_db.django.fields.NextUnifiedSerial("C0001", "A01", "01"),
                    max_length=40, unique=True)),
                ("sku", models.CharField(max_length=40)),
                ("amount", models.IntegerField()),
            ],
        ),
        migrations.CreateModel(
            name="Payment",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True,
                                           serialize=False, verbose_name="ID")),
                ("serial", models.CharField(max_length=40, unique=True)),
                ("amount", models.IntegerField()),
                ("order", models.ForeignKey(on_delete=models.deletion.PROTECT,
                                            to="orders.order")),
            ],
        ),
        # the application's login is granted hivenet_app: what it may do to the shop's tables
        migrations.RunSQL(
            "GRANT SELECT, INSERT ON orders_order, orders_payment TO hivenet_app; "
            "GRANT USAGE ON SEQUENCE orders_order_id_seq, orders_payment_id_seq TO hivenet_app",
            migrations.RunSQL.noop),
    ]
