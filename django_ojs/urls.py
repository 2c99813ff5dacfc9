"""URLs of django-ojs. Mount them with ``path("ojs/", include("django_ojs.urls"))``.

The OJS HTTP binding requires the ``/ojs/`` prefix (HB §3.1): ``/ojs/manifest`` and
``/ojs/v1/...``. Route names are in the ``ojs`` namespace (``reverse("ojs:job-detail")``).
"""

from __future__ import annotations

from django_ojs.api.urls import urlpatterns as api_urlpatterns

app_name = "ojs"

urlpatterns = list(api_urlpatterns)
