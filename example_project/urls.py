"""URLs of the example project: the Django admin."""

from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    # The OJS HTTP binding: /ojs/manifest and /ojs/v1/...
    path("ojs/", include("django_ojs.urls")),
]
