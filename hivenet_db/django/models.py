"""No models: the module is here so that Django sends the app its ``pre_migrate`` and
``post_migrate`` signals (it sends them to apps with a models module), which
``hivenet_db.django.migrating`` handles."""
